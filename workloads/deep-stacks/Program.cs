// deep-stacks: three threads, each recursing to its own known depth through its own method and
// then burning CPU at the bottom until the run ends, so every sample of a thread has the same,
// known stack: Main → Run → (thread start) → Descend{Shallow,Middle,Deep} × depth → Bottom.
// What a collector keeps of those stacks says where it cuts them (EventPipe at 100 frames,
// perf's frame-pointer callchain at kernel.perf_event_max_stack, DWARF at its stack dump).
using System.Runtime.CompilerServices;
using System.Text.Json.Nodes;

namespace Tracelab.Workloads;

public static class DeepStacks
{
    public static int Main(string[] args) => WorkloadHost.Run("deep-stacks", args, Run, _ => { });

    static volatile bool s_stop;

    [MethodImpl(MethodImplOptions.NoInlining)]
    static void Run(WorkloadContext ctx)
    {
        var depths = new[]
        {
            ("Shallow", ctx.Options.GetInt("shallow", 50)),
            ("Middle", ctx.Options.GetInt("middle", 150)),
            ("Deep", ctx.Options.GetInt("deep", 500)),
        };
        if (depths.Any(d => d.Item2 < 1)) throw new ArgumentException("--shallow, --middle and --deep must be at least 1");
        var depthTruth = new JsonObject();
        foreach (var (name, depth) in depths) depthTruth[$"Descend{name}"] = depth;
        ctx.Truth["depth"] = depthTruth;
        var threads = depths.Select(d => new Thread(() => Start(d.Item1, d.Item2)) { Name = $"deep-{d.Item1.ToLowerInvariant()}", IsBackground = true }).ToList();
        foreach (var t in threads) t.Start();
        while (ctx.Clock.Elapsed.TotalSeconds < ctx.Seconds) Thread.Sleep(10);
        s_stop = true;
        foreach (var t in threads) t.Join();
    }

    static void Start(string name, int depth)
    {
        switch (name)
        {
            case "Shallow": DescendShallow(depth); break;
            case "Middle": DescendMiddle(depth); break;
            default: DescendDeep(depth); break;
        }
    }

    // One method per thread, so a pattern names the thread's recursion. `+ 1` after the call keeps
    // it from being a tail call the JIT could turn into a jump (a frame fewer per level).
    [MethodImpl(MethodImplOptions.NoInlining)]
    static long DescendShallow(int n) => n <= 1 ? Bottom() : DescendShallow(n - 1) + 1;

    [MethodImpl(MethodImplOptions.NoInlining)]
    static long DescendMiddle(int n) => n <= 1 ? Bottom() : DescendMiddle(n - 1) + 1;

    [MethodImpl(MethodImplOptions.NoInlining)]
    static long DescendDeep(int n) => n <= 1 ? Bottom() : DescendDeep(n - 1) + 1;

    /// Burns CPU until the run ends. Fully optimized from the start: a Tier0 loop here would be
    /// replaced on stack (OSR), which is not what this workload is about.
    [MethodImpl(MethodImplOptions.NoInlining | MethodImplOptions.AggressiveOptimization)]
    static long Bottom()
    {
        ulong x = 88172645463325252UL;
        while (!s_stop)
        {
            for (var i = 0; i < 40_000; i++) x = x * 6364136223846793005UL + 1442695040888963407UL;
        }
        return (long)(x & 1);
    }
}
