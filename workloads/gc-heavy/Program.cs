// gc-heavy: allocation churn (--alloc-mb-per-s, default 200 MB/s per thread) (short-lived arrays and strings, with a ring of survivors so some
// objects get promoted) plus a known number of induced, blocking gen2 GCs (GC.Collect) spread
// evenly over the run. Stack: Main → Run → AllocateChurn; the main thread runs InduceCollections.
using System.Runtime.CompilerServices;
using System.Text.Json.Nodes;

namespace Tracelab.Workloads;

public static class GcHeavy
{
    public static int Main(string[] args) => WorkloadHost.Run("gc-heavy", args, Run);

    [MethodImpl(MethodImplOptions.NoInlining)]
    static void Run(WorkloadContext ctx)
    {
        var induced = ctx.Options.GetInt("induced", 10);
        var survivors = ctx.Options.GetInt("survivors", 4096);
        var mbPerSecond = ctx.Options.GetDouble("alloc-mb-per-s", 200);
        var churn = new PhaseMeter[Math.Max(1, ctx.Threads)];
        long objects = 0;
        var churners = Enumerable.Range(0, churn.Length).Select(i => new Thread(() =>
        {
            churn[i] = new PhaseMeter("churn", nameof(AllocateChurn));
            var n = 0L;
            churn[i].Measure(() => n = AllocateChurn(ctx, survivors, mbPerSecond, i));
            Interlocked.Add(ref objects, n);
            ctx.AddPhase(churn[i].Record());
        }) { Name = $"alloc-{i}", IsBackground = true }).ToList();
        foreach (var t in churners) t.Start();

        var inducer = new PhaseMeter("induce", nameof(InduceCollections));
        var done = 0;
        inducer.Measure(() => done = InduceCollections(ctx, induced));
        ctx.AddPhase(inducer.Record());
        foreach (var t in churners) t.Join();

        ctx.Truth["gc"] = new JsonObject { ["induced"] = done, ["objects_allocated"] = objects };
    }

    /// Allocates until the run ends; returns the number of objects allocated.
    [MethodImpl(MethodImplOptions.NoInlining)]
    static long AllocateChurn(WorkloadContext ctx, int survivors, double mbPerSecond, int seed)
    {
        var start = GC.GetAllocatedBytesForCurrentThread();
        var ring = new object[Math.Max(1, survivors)];
        var rng = new Random(seed);
        long count = 0;
        while (ctx.Clock.Elapsed.TotalSeconds < ctx.Seconds)
        {
            for (var i = 0; i < 1000; i++)
            {
                object o = (i % 4) switch
                {
                    0 => new byte[rng.Next(16, 2048)],
                    1 => new string('x', rng.Next(8, 256)),
                    2 => new List<int>(rng.Next(1, 64)),
                    _ => new int[rng.Next(4, 512)],
                };
                // One object in 16 survives for a while: gen0 GCs then have something to promote.
                if ((i & 15) == 0) ring[rng.Next(ring.Length)] = o;
                count++;
            }
            // Paced (0 = flat out): a few hundred GCs a second would flood event-based collectors
            // and make exact GC counts a test of their buffers rather than of the pipeline.
            while (mbPerSecond > 0 && ctx.Clock.Elapsed.TotalSeconds < ctx.Seconds
                   && GC.GetAllocatedBytesForCurrentThread() - start > mbPerSecond * 1e6 * ctx.Clock.Elapsed.TotalSeconds)
                Thread.Sleep(1);
        }
        GC.KeepAlive(ring);
        return count;
    }

    /// Calls GC.Collect `count` times, evenly spread over the run; returns how many it made.
    [MethodImpl(MethodImplOptions.NoInlining)]
    static int InduceCollections(WorkloadContext ctx, int count)
    {
        for (var k = 0; k < count; k++)
        {
            // The k-th collection happens at (k + 0.5) / count of the run.
            var at = TimeSpan.FromSeconds(ctx.Seconds * (k + 0.5) / count);
            var wait = at - ctx.Clock.Elapsed;
            if (wait > TimeSpan.Zero) Thread.Sleep(wait);
            GC.Collect();
        }
        return count;
    }
}
