// off-cpu: one thread that mostly waits, in three different ways, each in its own method
// (SleepWait: Thread.Sleep; LockWait: Monitor.Wait; PipeReadWait: a blocking read(2) on a pipe),
// beside a thread that spins (SpinWork). A cpu-clock profiler should see SpinWork only; an
// off-CPU (sched_switch) profiler should see the three waits in proportion to their wait time.
// Stack of the waiter: Main → Run → WaitCycle → SleepWait | LockWait | PipeReadWait.
using System.IO.Pipes;
using System.Runtime.CompilerServices;
using System.Text.Json.Nodes;

namespace Tracelab.Workloads;

public static class OffCpu
{
    static readonly object Gate = new();

    public static int Main(string[] args) => WorkloadHost.Run("off-cpu", args, Run);

    [MethodImpl(MethodImplOptions.NoInlining)]
    static void Run(WorkloadContext ctx)
    {
        var waitMs = ctx.Options.GetInt("wait-ms", 50);
        if (waitMs == 0) throw new ArgumentException("--wait-ms must be positive");

        using var pipeWriter = new AnonymousPipeServerStream(PipeDirection.Out);
        using var pipeReader = new AnonymousPipeClientStream(PipeDirection.In, pipeWriter.ClientSafePipeHandle);
        using var wantByte = new SemaphoreSlim(0);
        var done = false;

        // Answers each PipeReadWait after waitMs, so the read blocks for that long.
        var feeder = new Thread(() =>
        {
            while (true)
            {
                wantByte.Wait();
                if (Volatile.Read(ref done)) return;
                Thread.Sleep(waitMs);
                pipeWriter.WriteByte(1);
                pipeWriter.Flush();
            }
        }) { Name = "pipe-feeder", IsBackground = true };
        feeder.Start();

        var spin = new PhaseMeter("spin", nameof(SpinWork));
        var spinner = new Thread(() =>
        {
            while (ctx.Clock.Elapsed.TotalSeconds < ctx.Seconds) spin.Measure(() => SpinWork(10));
            ctx.AddPhase(spin.Record());
        }) { Name = "spin-0", IsBackground = true };
        spinner.Start();

        var sleep = new PhaseMeter("sleep", nameof(SleepWait));
        var monitor = new PhaseMeter("lock", nameof(LockWait));
        var pipe = new PhaseMeter("pipe", nameof(PipeReadWait));
        var waiter = new Thread(() =>
        {
            while (ctx.Clock.Elapsed.TotalSeconds < ctx.Seconds)
                WaitCycle(sleep, monitor, pipe, pipeReader, wantByte, waitMs);
            foreach (var m in new[] { sleep, monitor, pipe }) ctx.AddPhase(m.Record());
        }) { Name = "blocked-0", IsBackground = true };
        waiter.Start();

        spinner.Join();
        waiter.Join();
        Volatile.Write(ref done, true);
        wantByte.Release();
        feeder.Join();

        var methods = new JsonObject();
        double wall = 0, cpu = 0;
        var offCpu = new Dictionary<string, double>();
        foreach (var m in new[] { sleep, monitor, pipe })
        {
            var name = m.Record().Method;
            offCpu[name] = Math.Max(0, m.WallMs - m.CpuMs);
            // off_cpu_ms: the method's own time off the CPU (a blocked_seconds check's truth).
            methods[name] = new JsonObject { ["wall_ms"] = m.WallMs, ["cpu_ms"] = m.CpuMs, ["off_cpu_ms"] = offCpu[name], ["waits"] = m.Calls };
            wall += m.WallMs;
            cpu += m.CpuMs;
        }
        var offTotal = offCpu.Values.Sum();
        var offShares = new JsonObject();
        foreach (var (name, ms) in offCpu) offShares[name] = offTotal > 0 ? ms / offTotal : 0.0;

        ctx.Truth["blocked"] = new JsonObject
        {
            ["thread"] = "blocked-0",
            ["tid"] = ctx.Phases.First(p => p.Thread == "blocked-0").Tid,
            ["wait_ms"] = waitMs,
            ["wall_ms"] = wall,
            ["cpu_ms"] = cpu,
            ["methods"] = methods,
        };
        ctx.Truth["spin"] = new JsonObject
        {
            ["thread"] = "spin-0",
            ["method"] = nameof(SpinWork),
            ["wall_ms"] = spin.WallMs,
            ["cpu_ms"] = spin.CpuMs,
        };
        ctx.Truth["shares"] = new JsonObject
        {
            ["offcpu"] = offShares,
            // Of all thread CPU time spent in the app's methods, the spinning thread's share.
            ["cpu"] = ctx.CpuShares(nameof(SpinWork), nameof(SleepWait), nameof(LockWait), nameof(PipeReadWait)),
        };
    }

    [MethodImpl(MethodImplOptions.NoInlining)]
    static void WaitCycle(PhaseMeter sleep, PhaseMeter monitor, PhaseMeter pipe, Stream pipeReader, SemaphoreSlim wantByte, int waitMs)
    {
        sleep.Measure(() => SleepWait(waitMs));
        monitor.Measure(() => LockWait(waitMs));
        pipe.Measure(() => PipeReadWait(pipeReader, wantByte));
    }

    [MethodImpl(MethodImplOptions.NoInlining)]
    static void SleepWait(int ms) => Thread.Sleep(ms);

    /// A timed Monitor.Wait nobody pulses: the thread sits in the runtime's wait for `ms`.
    [MethodImpl(MethodImplOptions.NoInlining)]
    static void LockWait(int ms)
    {
        lock (Gate) Monitor.Wait(Gate, ms);
    }

    [MethodImpl(MethodImplOptions.NoInlining)]
    static void PipeReadWait(Stream pipeReader, SemaphoreSlim wantByte)
    {
        wantByte.Release();
        if (pipeReader.ReadByte() < 0) throw new EndOfStreamException("the pipe feeder closed the pipe early");
    }

    [MethodImpl(MethodImplOptions.NoInlining)]
    static ulong SpinWork(double cpuBudgetMs)
    {
        var end = Native.ThreadCpuMs() + cpuBudgetMs;
        ulong x = 88172645463325252UL;
        do
        {
            for (var i = 0; i < 40_000; i++) x = x * 6364136223846793005UL + 1442695040888963407UL;
        } while (Native.ThreadCpuMs() < end);
        return x;
    }
}
