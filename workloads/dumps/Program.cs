// dumps: a process with a known, steady set of threads for a dump to be checked against.
// --threads N idle threads `idle-0` … block on an event for the whole run; the main thread counts
// the process's threads (/proc/self/task) every 5 ms over the measured phase: a dump taken in the
// phase must list that many threads. With --crash the app then dies of an unhandled
// WorkloadException thrown on its main thread (`--crash true`), after truth.json is written and with no thread
// started in between (DOTNET_DbgEnableMiniDump=1 makes the runtime write a dump of that crash).
using System.Runtime.CompilerServices;
using System.Text.Json.Nodes;

namespace Tracelab.Workloads;

public static class Dumps
{
    static readonly ManualResetEventSlim Release = new(false);

    public static int Main(string[] args)
    {
        var code = WorkloadHost.Run("dumps", args, Run, WarmUp);
        if (code == 0 && CrashAsked(args)) Crash();
        Release.Set();
        return code;
    }

    [MethodImpl(MethodImplOptions.NoInlining)]
    static void WarmUp(WorkloadContext ctx)
    {
        for (var i = 0; i < ctx.Threads; i++)
        {
            var started = new ManualResetEventSlim(false);
            new Thread(() => IdleThread(started)) { Name = $"idle-{i}", IsBackground = true }.Start();
            started.Wait();
        }
        // The counting itself JIT-compiles before READY: no thread of the JIT's starts later.
        ThreadCount();
    }

    [MethodImpl(MethodImplOptions.NoInlining)]
    static void IdleThread(ManualResetEventSlim started)
    {
        started.Set();
        Release.Wait();
    }

    static bool CrashAsked(string[] args)
    {
        try { return Options.Parse(args).GetString("crash") == "true"; }
        catch (ArgumentException) { return false; }
    }

    static int ThreadCount() => Directory.GetDirectories("/proc/self/task").Length;

    [MethodImpl(MethodImplOptions.NoInlining)]
    static void Run(WorkloadContext ctx)
    {
        int min = int.MaxValue, max = 0, samples = 0;
        while (ctx.Clock.Elapsed.TotalSeconds < ctx.Seconds)
        {
            var n = ThreadCount();
            min = Math.Min(min, n);
            max = Math.Max(max, n);
            samples++;
            Thread.Sleep(5);
        }
        var end = ThreadCount();
        ctx.Truth["dump"] = new JsonObject
        {
            ["threads"] = new JsonObject { ["min"] = Math.Min(min, end), ["max"] = Math.Max(max, end), ["at_end"] = end, ["samples"] = samples },
            ["idle_threads"] = ctx.Threads,
            ["crash"] = ctx.Options.GetString("crash") == "true",
        };
    }

    [MethodImpl(MethodImplOptions.NoInlining)]
    static void Crash() => throw new WorkloadException("unhandled on purpose: the dumps workload crashes with --crash");
}
