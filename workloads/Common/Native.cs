using System.Runtime.InteropServices;

namespace Tracelab.Workloads;

/// libc calls the BCL does not expose: per-thread CPU time (what a cpu-clock sampler measures,
/// unlike Stopwatch, which also counts time the thread was preempted) and the kernel thread id
/// (what perf and LTTng report as tid).
public static partial class Native
{
    const int CLOCK_THREAD_CPUTIME_ID = 3;

    [StructLayout(LayoutKind.Sequential)]
    struct Timespec
    {
        public long Seconds;
        public long Nanoseconds;
    }

    [LibraryImport("libc", EntryPoint = "clock_gettime")]
    private static partial int ClockGetTime(int clock, out Timespec time);

    [LibraryImport("libc", EntryPoint = "gettid")]
    private static partial int GetTid();

    /// CPU time the calling thread has used, in milliseconds.
    public static double ThreadCpuMs()
    {
        if (ClockGetTime(CLOCK_THREAD_CPUTIME_ID, out var t) != 0)
            throw new InvalidOperationException($"clock_gettime(CLOCK_THREAD_CPUTIME_ID) failed: errno {Marshal.GetLastPInvokeError()}");
        return t.Seconds * 1000.0 + t.Nanoseconds / 1_000_000.0;
    }

    public static int Tid() => GetTid();
}
