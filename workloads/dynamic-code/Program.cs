// dynamic-code: CPU time in code the runtime makes at run time, three kinds in turn, in 10 ms
// slices of thread CPU time (an equal split): a DynamicMethod emitted with Reflection.Emit
// (`dynamicClass::EmitSpin`), a compiled Regex (RegexOptions.Compiled: the matcher is
// DynamicMethods the Regex makes, `Regex1_Scan` …) and an expression tree compiled to a
// delegate (`lambda_method…`) — and interface calls on four types in turn, which run through
// the runtime's virtual stub dispatch stubs. None of it is in any assembly file: only the perf
// map and EventPipe's method events name it. Stack: Main → Run → Slice → (the dynamic code).
using System.Linq.Expressions;
using System.Reflection.Emit;
using System.Runtime.CompilerServices;
using System.Text.Json.Nodes;
using System.Text.RegularExpressions;

namespace Tracelab.Workloads;

public static class DynamicCode
{
    const double SliceCpuMs = 10;

    /// Truth keys, in the order Slice runs them.
    static readonly string[] Kinds = ["emit", "regex", "expression", "dispatch"];

    /// `ulong EmitSpin(ulong x, int n)`: n rounds of x = x * a + c, emitted as IL.
    static readonly Func<ulong, int, ulong> EmitSpin = MakeEmitSpin();

    /// The same loop as an expression tree, compiled.
    static readonly Func<ulong, int, ulong> ExpressionSpin = MakeExpressionSpin();

    /// A backtracking-free pattern over a long text: the compiled matcher's scan loop is the hot code.
    static readonly Regex Compiled = new(@"(?:ab|cd)+x\d{3}", RegexOptions.Compiled | RegexOptions.CultureInvariant);
    static readonly string Text = string.Concat(Enumerable.Repeat("abcdabcdab", 400)) + "x123";

    public static int Main(string[] args) => WorkloadHost.Run("dynamic-code", args, Run, WarmUp);

    [MethodImpl(MethodImplOptions.NoInlining)]
    static void WarmUp(WorkloadContext ctx)
    {
        for (var kind = 0; kind < Kinds.Length; kind++) Slice(null, kind, 1);
    }

    [MethodImpl(MethodImplOptions.NoInlining)]
    static void Run(WorkloadContext ctx)
    {
        var declared = ctx.RunKindsInTurn(Kinds, "dyn", (meter, kind) => Slice(meter, kind, SliceCpuMs));
        // The dynamic code alone, without the dispatch phase: EventPipe's sampler stops a thread at
        // its next safe point, which for the call loop is its return into Slice.
        ctx.Truth["shares"] = new JsonObject
        {
            ["cpu"] = ctx.CpuShares(Kinds),
            ["cpu_dynamic"] = ctx.CpuShares(Kinds[..3]),
            ["declared"] = declared,
        };
    }

    [MethodImpl(MethodImplOptions.NoInlining)]
    static void Slice(PhaseMeter? meter, int kind, double cpuBudgetMs)
    {
        var wall = System.Diagnostics.Stopwatch.GetTimestamp();
        var cpu = Native.ThreadCpuMs();
        var end = cpu + cpuBudgetMs;
        ulong sink = 1;
        do
        {
            switch (kind)
            {
                case 0: sink = EmitSpin(sink, 200_000); break;
                case 1: sink += CountMatches(20); break;
                case 2: sink = ExpressionSpin(sink, 200_000); break;
                default: sink = Dispatch(sink, 50_000); break;
            }
        } while (Native.ThreadCpuMs() < end);
        meter?.Add(System.Diagnostics.Stopwatch.GetElapsedTime(wall).TotalMilliseconds, Native.ThreadCpuMs() - cpu);
        GC.KeepAlive(sink);
    }

    /// Between two reads of the thread's CPU clock (a P/Invoke, where EventPipe's sampler finds a
    /// thread at once) each kind runs ~0.3 ms, so the sampler finds it in the dynamic code.
    [MethodImpl(MethodImplOptions.NoInlining)]
    static ulong CountMatches(int times)
    {
        ulong n = 0;
        for (var i = 0; i < times; i++) n += (ulong)Compiled.Count(Text);
        return n;
    }

    /// Four implementations called in turn through one interface call site: a megamorphic site,
    /// which the runtime serves with its resolve stub (`stub<VSD_ResolveStub>` in a profile).
    static readonly IStep[] Steps = [new StepA(), new StepB(), new StepC(), new StepD()];

    [MethodImpl(MethodImplOptions.NoInlining)]
    static ulong Dispatch(ulong x, int n)
    {
        for (var i = 0; i < n; i++) x = Steps[i & 3].Step(x);
        return x;
    }

    static Func<ulong, int, ulong> MakeEmitSpin()
    {
        var method = new DynamicMethod("EmitSpin", typeof(ulong), [typeof(ulong), typeof(int)], typeof(DynamicCode).Module);
        var il = method.GetILGenerator();
        var i = il.DeclareLocal(typeof(int));
        var test = il.DefineLabel();
        var body = il.DefineLabel();
        il.Emit(OpCodes.Ldc_I4_0);
        il.Emit(OpCodes.Stloc, i);
        il.Emit(OpCodes.Br, test);
        il.MarkLabel(body);
        il.Emit(OpCodes.Ldarg_0);
        il.Emit(OpCodes.Ldc_I8, 6364136223846793005L);
        il.Emit(OpCodes.Mul);
        il.Emit(OpCodes.Ldc_I8, 1442695040888963407L);
        il.Emit(OpCodes.Add);
        il.Emit(OpCodes.Starg_S, (byte)0);
        il.Emit(OpCodes.Ldloc, i);
        il.Emit(OpCodes.Ldc_I4_1);
        il.Emit(OpCodes.Add);
        il.Emit(OpCodes.Stloc, i);
        il.MarkLabel(test);
        il.Emit(OpCodes.Ldloc, i);
        il.Emit(OpCodes.Ldarg_1);
        il.Emit(OpCodes.Blt, body);
        il.Emit(OpCodes.Ldarg_0);
        il.Emit(OpCodes.Ret);
        return method.CreateDelegate<Func<ulong, int, ulong>>();
    }

    static Func<ulong, int, ulong> MakeExpressionSpin()
    {
        var x = Expression.Parameter(typeof(ulong), "x");
        var n = Expression.Parameter(typeof(int), "n");
        var i = Expression.Variable(typeof(int), "i");
        var done = Expression.Label(typeof(ulong));
        var loop = Expression.Block(
            [i],
            Expression.Assign(i, Expression.Constant(0)),
            Expression.Loop(
                Expression.IfThenElse(
                    Expression.LessThan(i, n),
                    Expression.Block(
                        Expression.Assign(x, Expression.Add(Expression.Multiply(x, Expression.Constant(6364136223846793005UL)), Expression.Constant(1442695040888963407UL))),
                        Expression.PostIncrementAssign(i)),
                    Expression.Break(done, x)),
                done));
        return Expression.Lambda<Func<ulong, int, ulong>>(loop, x, n).Compile();
    }
}

public interface IStep
{
    ulong Step(ulong x);
}

sealed class StepA : IStep { [MethodImpl(MethodImplOptions.NoInlining)] public ulong Step(ulong x) => x * 3 + 1; }
sealed class StepB : IStep { [MethodImpl(MethodImplOptions.NoInlining)] public ulong Step(ulong x) => x * 5 + 7; }
sealed class StepC : IStep { [MethodImpl(MethodImplOptions.NoInlining)] public ulong Step(ulong x) => x ^ (x >> 3); }
sealed class StepD : IStep { [MethodImpl(MethodImplOptions.NoInlining)] public ulong Step(ulong x) => x + 11; }
