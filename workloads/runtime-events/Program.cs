// runtime-events: exercises the runtime's event surface in parts (`--parts`, comma list, default
// all), each measured from inside into truth.json, spread over --seconds:
// - contention: for each lock `lock-N` (`--rounds` per lock, e.g. 40,20,10), a holder thread takes
//   the lock, starts `--waiters` threads and holds it `--hold-ms` (10): each waiter that finds it
//   taken (Monitor.TryEnter fails) blocks in Monitor.Enter. Truth: contended entries and wait time
//   per lock, and the runtime's own Monitor.LockContentionCount over the whole measured phase.
// - alloc: `--alloc-mb` MB of Int64[], Int32[] and Double[] arrays (shares `--alloc-split`,
//   default 60,30,10), 1 KB each, one type after the other; bytes
//   per type from GC.GetAllocatedBytesForCurrentThread → AllocationTick ≈ bytes / 100 KB per type.
// - jit: `--dynamic-methods` DynamicMethods `tracelab_dyn_N`, each compiled and called once, and
//   one assembly (System.Private.Xml.Linq) loaded at run time; truth counts the assemblies the
//   AppDomain reported loaded during the phase.
// - threadpool: `--work-items` work items queued and completed (ThreadPool.CompletedWorkItemCount
//   delta too).
// - exceptions: `--exceptions` throws of WorkloadException("site N") from `ThrowAtSite`.
// - gcheap: ends with one induced GC with `--retain-mb` (16) MB of small arrays, two on the LOH
//   and one on the POH alive; its generation sizes (GC.GetGCMemoryInfo) are the truth the last
//   GCHeapStats event carries.
using System.Diagnostics;
using System.Reflection;
using System.Reflection.Emit;
using System.Runtime.CompilerServices;
using System.Text.Json.Nodes;

namespace Tracelab.Workloads;

public static class RuntimeEvents
{
    static readonly string[] AllParts = ["contention", "alloc", "jit", "threadpool", "exceptions", "gcheap"];
    static readonly List<string> LoadedDuringPhase = [];
    static volatile bool _recordLoads;

    public static int Main(string[] args) => WorkloadHost.Run("runtime-events", args, Run, WarmUp);

    // First use of Reflection.Emit, exceptions and the thread pool loads their machinery: do that
    // before READY so the measured phase counts only what it does itself.
    [MethodImpl(MethodImplOptions.NoInlining)]
    static void WarmUp(WorkloadContext ctx)
    {
        AppDomain.CurrentDomain.AssemblyLoad += (_, e) =>
        {
            if (_recordLoads) lock (LoadedDuringPhase) LoadedDuringPhase.Add(e.LoadedAssembly.GetName().Name ?? "?");
        };
        CompileDynamic("tracelab_warmup")();
        try { throw new InvalidOperationException("warm-up"); }
        catch (InvalidOperationException) { }
        using var done = new ManualResetEventSlim();
        ThreadPool.QueueUserWorkItem(_ => done.Set());
        done.Wait();
        var gate = new object();
        lock (gate) { }
        _ = new long[1]; _ = new int[1]; _ = new double[1];
        _ = Stopwatch.GetTimestamp();
    }

    [MethodImpl(MethodImplOptions.NoInlining)]
    static void Run(WorkloadContext ctx)
    {
        var parts = (ctx.Options.GetString("parts") ?? string.Join(",", AllParts)).Split(',', StringSplitOptions.TrimEntries | StringSplitOptions.RemoveEmptyEntries);
        foreach (var p in parts)
            if (!AllParts.Contains(p)) throw new ArgumentException($"unknown part `{p}`: expected {string.Join(", ", AllParts)}");
        var slice = TimeSpan.FromSeconds(ctx.Seconds / parts.Length);
        var contentionBefore = Monitor.LockContentionCount;
        var i = 0;
        foreach (var part in parts)
        {
            var until = slice * ++i;
            switch (part)
            {
                case "contention": Contention(ctx, until); break;
                case "alloc": Alloc(ctx); break;
                case "jit": Jit(ctx); break;
                case "threadpool": WorkItems(ctx); break;
                case "exceptions": Exceptions(ctx); break;
                case "gcheap": break;
            }
            var wait = until - ctx.Clock.Elapsed;
            if (wait > TimeSpan.Zero) Thread.Sleep(wait);
        }
        if (parts.Contains("gcheap")) GcHeap(ctx);
        // The runtime's own count of contended Monitor entries over the whole phase: every
        // contention, ours and the runtime libraries' alike, is one ContentionStart event.
        var contention = ctx.Truth["contention"] as JsonObject ?? new JsonObject();
        contention["lock_contention_count"] = Monitor.LockContentionCount - contentionBefore;
        ctx.Truth["contention"] = contention;
    }

    // --- contention -------------------------------------------------------------------------

    [MethodImpl(MethodImplOptions.NoInlining)]
    static void Contention(WorkloadContext ctx, TimeSpan until)
    {
        var rounds = (ctx.Options.GetString("rounds") ?? "40,20,10").Split(',').Select(int.Parse).ToArray();
        var waiters = ctx.Options.GetInt("waiters", 3);
        var holdMs = ctx.Options.GetInt("hold-ms", 10);
        var byLock = new JsonObject();
        long entries = 0;
        var totalRounds = rounds.Sum();
        var start = ctx.Clock.Elapsed;
        var done = 0;
        for (var l = 0; l < rounds.Length; l++)
        {
            var gate = new object();
            long lockEntries = 0;
            double waitMs = 0;
            for (var r = 0; r < rounds[l]; r++)
            {
                var (e, w) = ContendedRound(gate, waiters, holdMs);
                lockEntries += e;
                waitMs += w;
                // Spread the rounds over this part's slice of the run.
                var wait = start + (until - start) * (++done) / Math.Max(1, totalRounds) * 0.9 - ctx.Clock.Elapsed;
                if (wait > TimeSpan.Zero) Thread.Sleep(wait);
            }
            byLock[$"lock-{l}"] = new JsonObject { ["entries"] = lockEntries, ["wait_ms"] = waitMs };
            entries += lockEntries;
        }
        var contention = ctx.Truth["contention"] as JsonObject ?? new JsonObject();
        contention["entries"] = entries;
        contention["by_lock"] = byLock;
        contention["waiters"] = waiters;
        contention["hold_ms"] = holdMs;
        ctx.Truth["contention"] = contention;
    }

    /// One round: the holder takes `gate`, starts the waiters and holds it `holdMs`; each waiter
    /// that finds it taken (Monitor.TryEnter fails) blocks in Monitor.Enter until the holder lets
    /// go. No other lock is involved, so the only contended lock is `gate`. Returns (contended
    /// entries, wait ms).
    [MethodImpl(MethodImplOptions.NoInlining)]
    static (long, double) ContendedRound(object gate, int waiters, int holdMs)
    {
        long contended = 0;
        long waitTicks = 0;
        var threads = new Thread[waiters];
        Monitor.Enter(gate);
        for (var w = 0; w < waiters; w++)
        {
            threads[w] = new Thread(() =>
            {
                if (Monitor.TryEnter(gate))
                {
                    Monitor.Exit(gate);
                    return;
                }
                var t0 = Stopwatch.GetTimestamp();
                EnterContended(gate);
                Interlocked.Add(ref waitTicks, Stopwatch.GetTimestamp() - t0);
                Interlocked.Increment(ref contended);
                Monitor.Exit(gate);
            }) { Name = $"waiter-{w}", IsBackground = true };
            threads[w].Start();
        }
        Thread.Sleep(holdMs);
        Monitor.Exit(gate);
        foreach (var t in threads) t.Join();
        return (contended, waitTicks * 1000.0 / Stopwatch.Frequency);
    }

    [MethodImpl(MethodImplOptions.NoInlining)]
    static void EnterContended(object gate) => Monitor.Enter(gate);

    // --- allocations ------------------------------------------------------------------------

    [MethodImpl(MethodImplOptions.NoInlining)]
    static void Alloc(WorkloadContext ctx)
    {
        var totalMb = ctx.Options.GetDouble("alloc-mb", 200);
        var split = ctx.Options.GetDoubles("alloc-split", [60, 30, 10], 3);
        var sum = split.Sum();
        long[] target = split.Select(s => (long)(totalMb * 1024 * 1024 * s / sum)).ToArray();
        long[] bytes = new long[3];
        object? keep = null;
        // One type after the other, so that every tick of a type's stretch names that type (a
        // tick names the type whose allocation crossed the 100 KB mark; interleaved small steps
        // would hand the ticks out by where the mark falls, not by bytes) and at most the one
        // tick across each boundary is shared.
        for (var t = 0; t < 3; t++)
        {
            var before = GC.GetAllocatedBytesForCurrentThread();
            var allocated = 0L;
            while (allocated < target[t])
            {
                keep = t switch { 0 => new long[126], 1 => new int[252], _ => new double[126] };
                allocated += 1024;
            }
            bytes[t] = GC.GetAllocatedBytesForCurrentThread() - before;
        }
        GC.KeepAlive(keep);
        // Keyed without dots (truth paths are dotted); the event's TypeName is `type_name`.
        string[] keys = ["Int64", "Int32", "Double"];
        string[] names = ["System.Int64[]", "System.Int32[]", "System.Double[]"];
        var byType = new JsonObject();
        for (var t = 0; t < 3; t++)
            byType[keys[t]] = new JsonObject { ["type_name"] = names[t], ["bytes"] = bytes[t], ["ticks_expected"] = bytes[t] / 102400.0 };
        ctx.Truth["alloc"] = new JsonObject { ["by_type"] = byType, ["tick_bytes"] = 102400 };
    }

    // --- JIT and loader ---------------------------------------------------------------------

    [MethodImpl(MethodImplOptions.NoInlining)]
    static Func<int> CompileDynamic(string name)
    {
        var m = new DynamicMethod(name, typeof(int), Type.EmptyTypes, typeof(RuntimeEvents).Module);
        var il = m.GetILGenerator();
        il.Emit(OpCodes.Ldc_I4, name.Length);
        il.Emit(OpCodes.Ret);
        return m.CreateDelegate<Func<int>>();
    }

    [MethodImpl(MethodImplOptions.NoInlining)]
    static void Jit(WorkloadContext ctx)
    {
        var n = ctx.Options.GetInt("dynamic-methods", 50);
        var sum = 0;
        _recordLoads = true;
        for (var i = 0; i < n; i++) sum += CompileDynamic($"tracelab_dyn_{i}")();
        var assembly = Assembly.Load("System.Private.Xml.Linq");
        _recordLoads = false;
        string[] loaded;
        lock (LoadedDuringPhase) loaded = LoadedDuringPhase.ToArray();
        ctx.Truth["jit"] = new JsonObject
        {
            ["dynamic_methods"] = n,
            ["dynamic_method_prefix"] = "tracelab_dyn_",
            ["checksum"] = sum,
            ["loaded_assembly"] = assembly.GetName().Name,
            ["assemblies_loaded"] = loaded.Length,
            ["assembly_names"] = new JsonArray(loaded.Select(a => (JsonNode?)JsonValue.Create(a)).ToArray()),
        };
    }

    // --- thread pool ------------------------------------------------------------------------

    [MethodImpl(MethodImplOptions.NoInlining)]
    static void WorkItems(WorkloadContext ctx)
    {
        var n = ctx.Options.GetInt("work-items", 1000);
        var before = ThreadPool.CompletedWorkItemCount;
        var completed = 0;
        using var all = new CountdownEvent(n);
        for (var i = 0; i < n; i++)
            ThreadPool.UnsafeQueueUserWorkItem(_ => { Interlocked.Increment(ref completed); all.Signal(); }, null);
        all.Wait();
        ctx.Truth["threadpool"] = new JsonObject
        {
            ["queued"] = n,
            ["completed"] = completed,
            ["completed_work_item_count"] = ThreadPool.CompletedWorkItemCount - before,
        };
    }

    // --- exceptions with their throw site ----------------------------------------------------

    [MethodImpl(MethodImplOptions.NoInlining)]
    static void Exceptions(WorkloadContext ctx)
    {
        var n = ctx.Options.GetInt("exceptions", 100);
        var caught = 0;
        for (var i = 0; i < n; i++)
        {
            try { ThrowAtSite(i % 2); }
            catch (WorkloadException) { caught++; }
        }
        ctx.Truth["exceptions"] = new JsonObject
        {
            ["total"] = caught,
            ["type"] = typeof(WorkloadException).FullName,
            ["throw_site"] = $"{nameof(RuntimeEvents)}.{nameof(ThrowAtSite)}",
            ["by_type_message"] = new JsonObject
            {
                [$"{typeof(WorkloadException).FullName}: site 0"] = (n + 1) / 2,
                [$"{typeof(WorkloadException).FullName}: site 1"] = n / 2,
            },
        };
    }

    [MethodImpl(MethodImplOptions.NoInlining)]
    static void ThrowAtSite(int site) => throw new WorkloadException($"site {site}");

    // --- GC heap stats ------------------------------------------------------------------------

    static object[]? Retained;

    [MethodImpl(MethodImplOptions.NoInlining)]
    static void GcHeap(WorkloadContext ctx)
    {
        // Something in each generation the event reports: `--retain-mb` of 1 KB arrays (gen2 after
        // the GC), two 1 MB arrays (LOH) and a pinned 64 KB array (POH), alive until the sizes
        // are read.
        var retainMb = ctx.Options.GetDouble("retain-mb", 16);
        var small = new byte[(int)(retainMb * 1024)][];
        for (var i = 0; i < small.Length; i++) small[i] = new byte[1000];
        Retained = [small, new byte[1 << 20], new byte[1 << 20], GC.AllocateArray<byte>(64 * 1024, pinned: true)];
        GC.Collect(2, GCCollectionMode.Forced, blocking: true, compacting: true);
        var info = GC.GetGCMemoryInfo(GCKind.Any);
        var gens = new JsonObject();
        for (var g = 0; g < info.GenerationInfo.Length; g++)
            gens[$"gen{g}"] = info.GenerationInfo[g].SizeAfterBytes;
        var gc = ctx.Truth["gc"] as JsonObject ?? new JsonObject();
        gc["last"] = new JsonObject { ["index"] = info.Index, ["generation"] = info.Generation, ["size_after"] = gens };
        ctx.Truth["gc"] = gc;
        GC.KeepAlive(Retained);
    }
}
