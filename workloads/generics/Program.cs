// generics: one generic method, Generics.Spin<T>, burns CPU with five type arguments in turn —
// bool, int, long (each its own code), string (the code every reference type shares,
// Spin<System.__Canon>) and a struct of ours — in 10 ms slices of thread CPU time, an equal
// split. A perf map names all five `Spin(!!0,float64)`; which instantiation ran is what a
// collector must say. Stack: Main → Run → Slice → Spin<T>.
using System.Runtime.CompilerServices;
using System.Text.Json.Nodes;

namespace Tracelab.Workloads;

/// A struct type argument: Spin<GenericPoint> is compiled for it alone.
public readonly record struct GenericPoint(int X, int Y);

public static class Generics
{
    const double SliceCpuMs = 10;

    /// Truth keys, in the order Slice runs them.
    static readonly string[] Kinds = ["bool", "int", "long", "string", "struct"];

    public static int Main(string[] args) => WorkloadHost.Run("generics", args, Run, WarmUp);

    [MethodImpl(MethodImplOptions.NoInlining)]
    static void WarmUp(WorkloadContext ctx)
    {
        for (var kind = 0; kind < Kinds.Length; kind++) Slice(null, kind, 1);
    }

    [MethodImpl(MethodImplOptions.NoInlining)]
    static void Run(WorkloadContext ctx)
    {
        var declared = ctx.RunKindsInTurn(Kinds, "gen", (meter, kind) => Slice(meter, kind, SliceCpuMs));
        ctx.Truth["shares"] = new JsonObject { ["cpu"] = ctx.CpuShares(Kinds), ["declared"] = declared };
        ctx.Truth["instantiations"] = new JsonObject
        {
            ["bool"] = "System.Boolean",
            ["int"] = "System.Int32",
            ["long"] = "System.Int64",
            ["string"] = "System.__Canon",
            ["struct"] = typeof(GenericPoint).FullName,
        };
    }

    [MethodImpl(MethodImplOptions.NoInlining)]
    static void Slice(PhaseMeter? meter, int kind, double cpuBudgetMs)
    {
        var wall = System.Diagnostics.Stopwatch.GetTimestamp();
        var cpu = Native.ThreadCpuMs();
        var sink = kind switch
        {
            0 => Spin(true, cpuBudgetMs),
            1 => Spin(42, cpuBudgetMs),
            2 => Spin(42L, cpuBudgetMs),
            3 => Spin("forty-two", cpuBudgetMs),
            _ => Spin(new GenericPoint(4, 2), cpuBudgetMs),
        };
        meter?.Add(System.Diagnostics.Stopwatch.GetElapsedTime(wall).TotalMilliseconds, Native.ThreadCpuMs() - cpu);
        GC.KeepAlive(sink);
    }

    /// Burns `cpuBudgetMs` of this thread's CPU time, seeded by the value's hash. Fully optimized
    /// from its first call: one code version per instantiation, no on-stack replacement.
    [MethodImpl(MethodImplOptions.NoInlining | MethodImplOptions.AggressiveOptimization)]
    static ulong Spin<T>(T value, double cpuBudgetMs)
    {
        var end = Native.ThreadCpuMs() + cpuBudgetMs;
        var x = (ulong)EqualityComparer<T>.Default.GetHashCode(value!) | 1;
        do
        {
            for (var i = 0; i < 40_000; i++) x = x * 6364136223846793005UL + 1442695040888963407UL;
        } while (Native.ThreadCpuMs() < end);
        return x;
    }
}
