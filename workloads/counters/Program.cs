// counters: a process whose System.Runtime counters (cpu-usage, gc-heap-size, gen-0-gc-count,
// exception-count, alloc-rate, threadpool-queue-length) have values it measures itself.
//
// Before READY it holds --retained-mb of live arrays and blocks every thread-pool worker
// (min = max = ProcessorCount workers, each waiting on an event), then queues --queue-length more
// work items, which stay queued: the pool's queue length is that number for the whole run.
// In the measured phase (--seconds) it burns CPU on --cpu-threads threads (`cpu-N`, a duty cycle
// of --cpu-duty of thread CPU time), allocates --alloc-mb-per-s in 8 KB arrays with --gen0-per-s
// induced gen0 collections (`alloc`), and throws and catches --exceptions-per-s
// WorkloadExceptions (`throw`), while the main thread samples GC.GetTotalMemory(false) and the
// queue length every 10 ms. After the phase it idles --linger-ms, so a counter interval that
// ends after the phase reports its last increments.
using System.Diagnostics;
using System.Runtime.CompilerServices;
using System.Text.Json.Nodes;

namespace Tracelab.Workloads;

public static class Counters
{
    static readonly ManualResetEventSlim Release = new(false);
    static readonly List<byte[]> Retained = new();
    static volatile object? s_sink;

    public static int Main(string[] args)
    {
        var code = WorkloadHost.Run("counters", args, Run, WarmUp);
        Release.Set();
        return code;
    }

    [MethodImpl(MethodImplOptions.NoInlining)]
    static void WarmUp(WorkloadContext ctx)
    {
        var retainedMb = ctx.Options.GetInt("retained-mb", 64);
        for (var i = 0; i < retainedMb; i++)
        {
            var block = new byte[1 << 20];
            Array.Fill(block, (byte)i);
            Retained.Add(block);
        }
        try { ThrowOne(); } catch (WorkloadException) { }

        var workers = Environment.ProcessorCount;
        ThreadPool.GetMaxThreads(out _, out var io);
        if (!ThreadPool.SetMinThreads(workers, io) || !ThreadPool.SetMaxThreads(workers, io))
            throw new InvalidOperationException($"could not pin the thread pool to {workers} workers");
        using var blocked = new CountdownEvent(workers);
        for (var i = 0; i < workers; i++)
            ThreadPool.UnsafeQueueUserWorkItem(_ => { blocked.Signal(); Release.Wait(); }, null);
        if (!blocked.Wait(TimeSpan.FromSeconds(30)))
            throw new InvalidOperationException($"the thread pool did not start {workers} workers within 30 s");
        var queued = ctx.Options.GetInt("queue-length", 5);
        for (var i = 0; i < queued; i++) ThreadPool.UnsafeQueueUserWorkItem(_ => { }, null);
        var deadline = Stopwatch.StartNew();
        while (ThreadPool.PendingWorkItemCount != queued)
        {
            if (deadline.Elapsed.TotalSeconds > 10)
                throw new InvalidOperationException($"the queue holds {ThreadPool.PendingWorkItemCount} items, not {queued}");
            Thread.Sleep(5);
        }
        GC.Collect();
        SampleHeapMb();
    }

    static double SampleHeapMb() => GC.GetTotalMemory(false) / 1e6;

    [MethodImpl(MethodImplOptions.NoInlining)]
    static void Run(WorkloadContext ctx)
    {
        var seconds = ctx.Seconds;
        var cpuThreads = ctx.Options.GetInt("cpu-threads", 1);
        var duty = Math.Clamp(ctx.Options.GetDouble("cpu-duty", 0.5), 0.05, 1.0);
        var allocPerS = ctx.Options.GetDouble("alloc-mb-per-s", 40) * 1_000_000;
        var gen0PerS = ctx.Options.GetDouble("gen0-per-s", 10);
        var exceptionsPerS = ctx.Options.GetDouble("exceptions-per-s", 100);
        var cpuBefore = Environment.CpuUsage.TotalTime;
        long exceptions = 0, induced = 0;

        var workers = new List<Thread>();
        for (var i = 0; i < cpuThreads; i++)
            workers.Add(new Thread(() => Burn(ctx, seconds, duty)) { Name = $"cpu-{i}", IsBackground = true });
        workers.Add(new Thread(() => induced = Allocate(ctx, seconds, allocPerS, gen0PerS)) { Name = "alloc", IsBackground = true });
        workers.Add(new Thread(() => exceptions = Throw(ctx, seconds, exceptionsPerS)) { Name = "throw", IsBackground = true });
        foreach (var t in workers) t.Start();

        var heap = new List<double>();
        long queueMin = long.MaxValue, queueMax = long.MinValue;
        while (ctx.Clock.Elapsed.TotalSeconds < seconds)
        {
            heap.Add(SampleHeapMb());
            var q = ThreadPool.PendingWorkItemCount;
            queueMin = Math.Min(queueMin, q);
            queueMax = Math.Max(queueMax, q);
            Thread.Sleep(10);
        }
        foreach (var t in workers) t.Join();
        var wall = ctx.Clock.Elapsed.TotalSeconds;
        var cpu = (Environment.CpuUsage.TotalTime - cpuBefore).TotalSeconds;
        heap.Sort();

        ctx.Truth["counters"] = new JsonObject
        {
            // As the runtime's cpu-usage: process CPU time over wall time, over all processors.
            ["cpu_usage_pct"] = cpu / wall / Environment.ProcessorCount * 100,
            ["processor_count"] = Environment.ProcessorCount,
            // As gc-heap-size: GC.GetTotalMemory(false) in MB of 10^6 bytes (not rounded: .NET 10 divides as a double).
            ["gc_heap_mb"] = new JsonObject { ["min"] = heap[0], ["median"] = heap[heap.Count / 2], ["max"] = heap[^1], ["samples"] = heap.Count },
            ["exceptions"] = exceptions,
            ["induced_gen0"] = induced,
            ["threadpool_queue_length"] = new JsonObject
            {
                ["declared"] = ctx.Options.GetInt("queue-length", 5), ["min"] = queueMin, ["max"] = queueMax,
            },
        };
        Thread.Sleep(TimeSpan.FromMilliseconds(ctx.Options.GetDouble("linger-ms", 1500)));
    }

    [MethodImpl(MethodImplOptions.NoInlining)]
    static void Burn(WorkloadContext ctx, double seconds, double duty)
    {
        const double sliceMs = 10;
        var idleMs = sliceMs * (1 - duty) / duty;
        while (ctx.Clock.Elapsed.TotalSeconds < seconds)
        {
            var start = Native.ThreadCpuMs();
            var x = 1.0;
            while (Native.ThreadCpuMs() - start < sliceMs) x = Math.Sqrt(x + 1.0);
            s_sink = x;
            if (idleMs > 0) Thread.Sleep(TimeSpan.FromMilliseconds(idleMs));
        }
    }

    [MethodImpl(MethodImplOptions.NoInlining)]
    static long Allocate(WorkloadContext ctx, double seconds, double bytesPerS, double gen0PerS)
    {
        const int size = 8192;
        long allocated = 0, induced = 0;
        while (ctx.Clock.Elapsed.TotalSeconds < seconds)
        {
            var t = ctx.Clock.Elapsed.TotalSeconds;
            while (allocated < bytesPerS * t)
            {
                s_sink = new byte[size];
                allocated += size;
            }
            if (gen0PerS > 0 && induced < (long)(gen0PerS * t))
            {
                GC.Collect(0, GCCollectionMode.Forced, blocking: true);
                induced++;
            }
            Thread.Sleep(5);
        }
        return induced;
    }

    [MethodImpl(MethodImplOptions.NoInlining)]
    static long Throw(WorkloadContext ctx, double seconds, double perS)
    {
        long thrown = 0;
        while (ctx.Clock.Elapsed.TotalSeconds < seconds)
        {
            var due = (long)(perS * ctx.Clock.Elapsed.TotalSeconds);
            for (; thrown < due; thrown++)
            {
                try { ThrowOne(); } catch (WorkloadException) { }
            }
            Thread.Sleep(5);
        }
        return thrown;
    }

    [MethodImpl(MethodImplOptions.NoInlining)]
    static void ThrowOne() => throw new WorkloadException("counted");
}
