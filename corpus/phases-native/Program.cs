// A batch job in three phases, then it exits by itself:
//  1. crunch: one worker thread alternates Checksum.Crunch and Checksum.Mix, 3:1 by its own CPU
//     time (read with clock_gettime(CLOCK_THREAD_CPUTIME_ID)), for the seconds given;
//  2. wait: the same thread then waits in native code (poll(2) on a pipe nobody writes to) for
//     a second and a half — no CPU, no managed frame on top;
//  3. fan-out: four short-lived threads hash in parallel and are joined.
// It writes what it measured from inside to the file named by its first argument, in its own
// format (report.json: per-phase thread CPU seconds and wall seconds). It knows nothing of any
// profiler.
using System.Diagnostics;
using System.Globalization;
using System.Runtime.CompilerServices;
using System.Runtime.InteropServices;
using System.Text.Json;

var report = args.Length > 0 ? args[0] : "report.json";
var seconds = args.Length > 1 ? double.Parse(args[1], CultureInfo.InvariantCulture) : 4.0;
var result = new Dictionary<string, object>();
var worker = new Thread(() =>
{
    var (crunch, mix) = Checksum.Run(TimeSpan.FromSeconds(seconds));
    result["crunch_cpu_s"] = crunch;
    result["mix_cpu_s"] = mix;
    var wait = Stopwatch.StartNew();
    var cpuBefore = Clock.ThreadCpuSeconds();
    NativeWait.Poll(1500);
    result["native_wait_s"] = wait.Elapsed.TotalSeconds;
    result["native_wait_cpu_s"] = Clock.ThreadCpuSeconds() - cpuBefore;
}) { Name = "checksum-worker" };
worker.Start();
worker.Join();

var fanOut = Stopwatch.StartNew();
var helpers = Enumerable.Range(0, 4).Select(i => new Thread(() => Checksum.Hash(i, 200_000)) { Name = $"hash-{i}" }).ToList();
helpers.ForEach(t => t.Start());
helpers.ForEach(t => t.Join());
result["fan_out_s"] = fanOut.Elapsed.TotalSeconds;
result["threads_joined"] = helpers.Count + 1;
File.WriteAllText(report, JsonSerializer.Serialize(result));
Console.WriteLine(string.Create(CultureInfo.InvariantCulture,
    $"done: crunch {result["crunch_cpu_s"]:F2} s, mix {result["mix_cpu_s"]:F2} s of CPU; waited {result["native_wait_s"]:F2} s"));

static class Clock
{
    [StructLayout(LayoutKind.Sequential)]
    struct Timespec { public long Sec; public long Nsec; }

    [DllImport("libc", EntryPoint = "clock_gettime")]
    static extern int ClockGettime(int clock, out Timespec ts);

    const int CLOCK_THREAD_CPUTIME_ID = 3;

    public static double ThreadCpuSeconds()
    {
        ClockGettime(CLOCK_THREAD_CPUTIME_ID, out var ts);
        return ts.Sec + ts.Nsec / 1e9;
    }
}

static class Checksum
{
    static ulong sink;

    public static (double crunch, double mix) Run(TimeSpan total)
    {
        var clock = Stopwatch.StartNew();
        double crunch = 0, mix = 0;
        while (clock.Elapsed < total)
        {
            crunch += Timed(() => Crunch(0.012));
            mix += Timed(() => Mix(0.004));
        }
        return (crunch, mix);
    }

    static double Timed(Action step)
    {
        var before = Clock.ThreadCpuSeconds();
        step();
        return Clock.ThreadCpuSeconds() - before;
    }

    /// Burns `cpuSeconds` of this thread's CPU time in a multiply-add chain.
    [MethodImpl(MethodImplOptions.NoInlining)]
    public static void Crunch(double cpuSeconds)
    {
        var end = Clock.ThreadCpuSeconds() + cpuSeconds;
        ulong x = 0x9E3779B97F4A7C15;
        do
        {
            for (var i = 0; i < 20_000; i++) x = x * 6364136223846793005UL + 1442695040888963407UL;
        } while (Clock.ThreadCpuSeconds() < end);
        sink ^= x;
    }

    /// Burns `cpuSeconds` of this thread's CPU time in a xorshift chain.
    [MethodImpl(MethodImplOptions.NoInlining)]
    public static void Mix(double cpuSeconds)
    {
        var end = Clock.ThreadCpuSeconds() + cpuSeconds;
        ulong x = 88172645463325252UL;
        do
        {
            for (var i = 0; i < 20_000; i++) { x ^= x << 13; x ^= x >> 7; x ^= x << 17; }
        } while (Clock.ThreadCpuSeconds() < end);
        sink ^= x;
    }

    [MethodImpl(MethodImplOptions.NoInlining)]
    public static void Hash(int seed, int rounds)
    {
        ulong h = (ulong)seed;
        for (var i = 0; i < rounds; i++) h = (h ^ (ulong)i) * 1099511628211UL;
        Interlocked.Or(ref sink, h);
    }
}

static unsafe class NativeWait
{
    [StructLayout(LayoutKind.Sequential)]
    struct PollFd { public int Fd; public short Events; public short Revents; }

    [DllImport("libc", EntryPoint = "pipe")]
    static extern int Pipe(int* fds);

    [DllImport("libc", EntryPoint = "poll")]
    static extern int PollNative(PollFd* fds, ulong n, int timeoutMs);

    [DllImport("libc", EntryPoint = "close")]
    static extern int Close(int fd);

    /// Waits `ms` in poll(2) on the read end of a pipe nobody writes to.
    [MethodImpl(MethodImplOptions.NoInlining)]
    public static void Poll(int ms)
    {
        int* fds = stackalloc int[2];
        if (Pipe(fds) != 0) throw new InvalidOperationException("pipe failed");
        var pfd = new PollFd { Fd = fds[0], Events = 1 };
        var deadline = Stopwatch.GetTimestamp() + ms * Stopwatch.Frequency / 1000;
        while (Stopwatch.GetTimestamp() < deadline)
        {
            var left = (int)((deadline - Stopwatch.GetTimestamp()) * 1000 / Stopwatch.Frequency);
            PollNative(&pfd, 1, Math.Max(1, left));
        }
        Close(fds[0]);
        Close(fds[1]);
    }
}
