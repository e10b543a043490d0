// wakeups: one thread (`blocked-0`) that blocks in four ways, each woken by a known waker, so a
// wake-up profiler can be scored on *who* ended each wait:
//   SleepWait          Thread.Sleep                     → no thread: the kernel's timer
//   PipeReadWait       read(2) on an anonymous pipe     → thread `pipe-feeder`, in FeedPipe (write(2))
//   LockContendedWait  lock held by thread `lock-holder` → thread `lock-holder`, in ReleaseLock (Monitor.Exit)
//   MonitorPulsedWait  Monitor.Wait                      → thread `pulser`, in PulseWaiter (Monitor.Pulse);
//                      then the re-acquire of the lock the pulser still holds
//                                                        → thread `pulser`, in ExitAfterPulse (Monitor.Exit)
// Each helper acts only once the waiter is surely blocked (it sleeps --wait-ms after the waiter
// asked), so the waits last about --wait-ms; the pulser holds the lock --hold-ms after pulsing.
// The app measures each wait from inside (Stopwatch); for the Monitor.Wait it splits the time at
// the pulse (measured by the pulser on the same clock): wait part vs re-acquire part.
using System.Diagnostics;
using System.IO.Pipes;
using System.Runtime.CompilerServices;
using System.Text.Json.Nodes;

namespace Tracelab.Workloads;

public static class Wakeups
{
    static readonly object LockGate = new();
    static readonly object PulseGate = new();
    static long _pulseAt, _exitAt;

    public static int Main(string[] args) => WorkloadHost.Run("wakeups", args, Run, WarmUp);

    static Helpers? _helpers;

    sealed class Helpers : IDisposable
    {
        public readonly AnonymousPipeServerStream PipeWriter = new(PipeDirection.Out);
        public readonly AnonymousPipeClientStream PipeReader;
        public readonly SemaphoreSlim WantByte = new(0), WantLock = new(0), LockTaken = new(0), WantPulse = new(0);
        public volatile bool Done;
        public readonly List<Thread> Threads = new();
        public int WaitMs, HoldMs;

        public Helpers() => PipeReader = new AnonymousPipeClientStream(PipeDirection.In, PipeWriter.ClientSafePipeHandle);

        public void Dispose()
        {
            Done = true;
            WantByte.Release();
            WantLock.Release();
            WantPulse.Release();
            foreach (var t in Threads) t.Join();
            PipeReader.Dispose();
            PipeWriter.Dispose();
        }
    }

    /// Starts the helper threads and runs every wait once, so JIT and first-use costs stay out of
    /// the measured phase.
    static void WarmUp(WorkloadContext ctx)
    {
        var h = new Helpers
        {
            WaitMs = ctx.Options.GetInt("wait-ms", 30),
            HoldMs = ctx.Options.GetInt("hold-ms", 10),
        };
        if (h.WaitMs <= 0 || h.HoldMs <= 0) throw new ArgumentException("--wait-ms and --hold-ms must be positive");
        Start(h, "pipe-feeder", () =>
        {
            while (true)
            {
                h.WantByte.Wait();
                if (h.Done) return;
                Thread.Sleep(h.WaitMs);
                FeedPipe(h.PipeWriter);
            }
        });
        Start(h, "lock-holder", () =>
        {
            while (true)
            {
                h.WantLock.Wait();
                if (h.Done) return;
                Monitor.Enter(LockGate);
                h.LockTaken.Release();
                Thread.Sleep(h.WaitMs);
                ReleaseLock();
            }
        });
        Start(h, "pulser", () =>
        {
            while (true)
            {
                h.WantPulse.Wait();
                if (h.Done) return;
                Thread.Sleep(h.WaitMs);
                Monitor.Enter(PulseGate);
                Volatile.Write(ref _pulseAt, Stopwatch.GetTimestamp());
                PulseWaiter();
                Thread.Sleep(h.HoldMs);
                Volatile.Write(ref _exitAt, Stopwatch.GetTimestamp());
                ExitAfterPulse();
            }
        });
        _helpers = h;
        var scratch = new Meters();
        WaitCycle(h, scratch);
    }

    static void Start(Helpers h, string name, ThreadStart body)
    {
        var t = new Thread(body) { Name = name, IsBackground = true };
        t.Start();
        h.Threads.Add(t);
    }

    sealed class Meters
    {
        public readonly PhaseMeter Sleep = new("sleep", nameof(SleepWait));
        public readonly PhaseMeter Pipe = new("pipe", nameof(PipeReadWait));
        public readonly PhaseMeter Lock = new("lock", nameof(LockContendedWait));
        public readonly PhaseMeter Monitor = new("monitor", nameof(MonitorPulsedWait));
        public double MonitorWaitMs, MonitorReacquireMs;
        public PhaseMeter[] All => new[] { Sleep, Pipe, Lock, Monitor };
    }

    [MethodImpl(MethodImplOptions.NoInlining)]
    static void Run(WorkloadContext ctx)
    {
        var h = _helpers ?? throw new InvalidOperationException("warm-up did not run");
        var m = new Meters();
        var waiter = new Thread(() =>
        {
            while (ctx.Clock.Elapsed.TotalSeconds < ctx.Seconds) WaitCycle(h, m);
            foreach (var meter in m.All) ctx.AddPhase(meter.Record());
        }) { Name = "blocked-0", IsBackground = true };
        waiter.Start();
        waiter.Join();
        h.Dispose();

        var waits = new JsonObject();
        void Wait(string kind, PhaseMeter meter, string wakerThread, string wakerMethod)
        {
            waits[kind] = new JsonObject
            {
                ["method"] = meter.Record().Method,
                ["waker_thread"] = wakerThread,
                ["waker_method"] = wakerMethod,
                ["waits"] = meter.Calls,
                ["blocked_ms"] = Math.Max(0, meter.WallMs - meter.CpuMs),
            };
        }
        Wait("sleep", m.Sleep, "", "timer / kernel");
        Wait("pipe", m.Pipe, "pipe-feeder", nameof(FeedPipe));
        Wait("lock", m.Lock, "lock-holder", nameof(ReleaseLock));
        Wait("monitor", m.Monitor, "pulser", nameof(PulseWaiter));
        var monitor = (JsonObject)waits["monitor"]!;
        monitor["reacquire_waker_method"] = nameof(ExitAfterPulse);
        monitor["wait_ms"] = m.MonitorWaitMs;
        monitor["reacquire_ms"] = m.MonitorReacquireMs;
        var split = m.MonitorWaitMs + m.MonitorReacquireMs;
        ctx.Truth["waits"] = waits;
        ctx.Truth["blocked"] = new JsonObject
        {
            ["thread"] = "blocked-0",
            ["tid"] = ctx.Phases.First(p => p.Thread == "blocked-0").Tid,
        };
        ctx.Truth["shares"] = new JsonObject
        {
            // Of the Monitor.Wait's blocked time, the part before the pulse (woken by Pulse) and
            // after it (the re-acquire, woken by the pulser's Monitor.Exit).
            ["monitor"] = new JsonObject
            {
                ["pulse"] = split > 0 ? m.MonitorWaitMs / split : 0.0,
                ["exit"] = split > 0 ? m.MonitorReacquireMs / split : 0.0,
            },
        };
    }

    [MethodImpl(MethodImplOptions.NoInlining)]
    static void WaitCycle(Helpers h, Meters m)
    {
        m.Sleep.Measure(() => SleepWait(h.WaitMs));
        m.Pipe.Measure(() => PipeReadWait(h));
        h.WantLock.Release();
        h.LockTaken.Wait();
        m.Lock.Measure(LockContendedWait);
        Monitor.Enter(PulseGate);
        h.WantPulse.Release();
        var start = Stopwatch.GetTimestamp();
        m.Monitor.Measure(MonitorPulsedWait);
        Monitor.Exit(PulseGate);
        long pulse = Volatile.Read(ref _pulseAt), exit = Volatile.Read(ref _exitAt);
        m.MonitorWaitMs += Stopwatch.GetElapsedTime(start, pulse).TotalMilliseconds;
        m.MonitorReacquireMs += Stopwatch.GetElapsedTime(pulse, exit).TotalMilliseconds;
    }

    [MethodImpl(MethodImplOptions.NoInlining)]
    static void SleepWait(int ms) => Thread.Sleep(ms);

    [MethodImpl(MethodImplOptions.NoInlining)]
    static void PipeReadWait(Helpers h)
    {
        h.WantByte.Release();
        if (h.PipeReader.ReadByte() < 0) throw new EndOfStreamException("the pipe feeder closed the pipe early");
    }

    [MethodImpl(MethodImplOptions.NoInlining)]
    static void FeedPipe(Stream writer)
    {
        writer.WriteByte(1);
        writer.Flush();
    }

    [MethodImpl(MethodImplOptions.NoInlining)]
    static void LockContendedWait()
    {
        lock (LockGate) { }
    }

    [MethodImpl(MethodImplOptions.NoInlining)]
    static void ReleaseLock() => Monitor.Exit(LockGate);

    /// Waits for the pulse with the lock held by the caller; returns with it re-acquired.
    [MethodImpl(MethodImplOptions.NoInlining)]
    static void MonitorPulsedWait() => Monitor.Wait(PulseGate);

    [MethodImpl(MethodImplOptions.NoInlining)]
    static void PulseWaiter() => Monitor.Pulse(PulseGate);

    [MethodImpl(MethodImplOptions.NoInlining)]
    static void ExitAfterPulse() => Monitor.Exit(PulseGate);
}
