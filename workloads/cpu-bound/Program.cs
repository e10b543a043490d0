// cpu-bound: two CPU loops with a declared split of thread CPU time (70/30 by default),
// interleaved in short slices so that a collector starting late still sees the same split.
// Stack: Main → Run → Phase → HotLoop | ColdLoop.
using System.Runtime.CompilerServices;

namespace Tracelab.Workloads;

public static class CpuBound
{
    const double SliceCpuMs = 20;

    public static int Main(string[] args) => WorkloadHost.Run("cpu-bound", args, Run, WarmUp);

    [MethodImpl(MethodImplOptions.NoInlining)]
    static void WarmUp(WorkloadContext ctx)
    {
        HotLoop(30);
        ColdLoop(30);
    }

    [MethodImpl(MethodImplOptions.NoInlining)]
    static void Run(WorkloadContext ctx)
    {
        var hotShare = ctx.Options.GetDouble("hot-percent", 70) / 100.0;
        if (hotShare > 1) throw new ArgumentException("--hot-percent must be at most 100");
        ctx.RunThreads(Math.Max(1, ctx.Threads), "cpu", _ =>
        {
            var hot = new PhaseMeter("hot", nameof(HotLoop));
            var cold = new PhaseMeter("cold", nameof(ColdLoop));
            while (ctx.Clock.Elapsed.TotalSeconds < ctx.Seconds)
            {
                Phase(hot, isHot: true, SliceCpuMs * hotShare);
                Phase(cold, isHot: false, SliceCpuMs * (1 - hotShare));
            }
            ctx.AddPhase(hot.Record());
            ctx.AddPhase(cold.Record());
        });
        ctx.Truth["shares"] = new System.Text.Json.Nodes.JsonObject
        {
            ["cpu"] = ctx.CpuShares(nameof(HotLoop), nameof(ColdLoop)),
            ["declared"] = new System.Text.Json.Nodes.JsonObject { ["HotLoop"] = hotShare, ["ColdLoop"] = 1 - hotShare },
        };
    }

    [MethodImpl(MethodImplOptions.NoInlining)]
    static void Phase(PhaseMeter meter, bool isHot, double cpuBudgetMs)
    {
        if (cpuBudgetMs <= 0) return;
        // Measured here rather than through a lambda, so no closure frame sits between Phase and the loop.
        var wall = System.Diagnostics.Stopwatch.GetTimestamp();
        var cpu = Native.ThreadCpuMs();
        var sink = isHot ? HotLoop(cpuBudgetMs) : ColdLoop(cpuBudgetMs);
        meter.Add(System.Diagnostics.Stopwatch.GetElapsedTime(wall).TotalMilliseconds, Native.ThreadCpuMs() - cpu);
        GC.KeepAlive(sink);
    }

    /// Burns `cpuBudgetMs` of this thread's CPU time in a multiply-add chain.
    [MethodImpl(MethodImplOptions.NoInlining)]
    static ulong HotLoop(double cpuBudgetMs)
    {
        var end = Native.ThreadCpuMs() + cpuBudgetMs;
        ulong x = 88172645463325252UL;
        do
        {
            // ~50 µs of work between clock reads keeps the syscall's share of samples far below 1 %.
            for (var i = 0; i < 40_000; i++) x = x * 6364136223846793005UL + 1442695040888963407UL;
        } while (Native.ThreadCpuMs() < end);
        return x;
    }

    /// Burns `cpuBudgetMs` of this thread's CPU time in a xorshift chain.
    [MethodImpl(MethodImplOptions.NoInlining)]
    static ulong ColdLoop(double cpuBudgetMs)
    {
        var end = Native.ThreadCpuMs() + cpuBudgetMs;
        ulong x = 2463534242UL;
        do
        {
            for (var i = 0; i < 40_000; i++)
            {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
            }
        } while (Native.ThreadCpuMs() < end);
        return x;
    }
}
