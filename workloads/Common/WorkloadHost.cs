// The protocol every workload follows with the tracelab engine (shared/DESIGN.md §4):
//   1. print "TRACELAB READY pid=<pid> workload=<name>" (flushed) once warmed up,
//   2. wait for --go-file to exist (collectors start in between; their sessions are asynchronous),
//   3. run the measured phase, measuring itself from inside,
//   4. write truth.json atomically (temp + rename), print "TRACELAB DONE", exit 0.
using System.Diagnostics;
using System.Runtime.CompilerServices;
using System.Text.Json;
using System.Text.Json.Nodes;

namespace Tracelab.Workloads;

/// What a workload body receives: its options, the clock of the measured phase and the truth
/// document it fills.
public sealed class WorkloadContext
{
    public WorkloadContext(string name, Options options)
    {
        Name = name;
        Options = options;
    }

    public string Name { get; }
    public Options Options { get; }
    public double Seconds => Options.Seconds;
    public int Threads => Options.Threads;

    /// Started when the go-file appeared.
    public Stopwatch Clock { get; } = new();

    /// Sections the workload adds (`shares`, `exceptions`, `blocked`, `routes` …).
    public JsonObject Truth { get; } = new();

    readonly List<PhaseRecord> _phases = new();

    public void AddPhase(PhaseRecord phase)
    {
        lock (_phases) _phases.Add(phase);
    }

    public IReadOnlyList<PhaseRecord> Phases
    {
        get { lock (_phases) return _phases.ToList(); }
    }

    /// Shares of thread CPU time among the given methods, summed over all phases: the
    /// denominator is the compared methods only (DESIGN.md §4).
    public JsonObject CpuShares(params string[] methods)
    {
        var cpu = methods.ToDictionary(m => m, m => Phases.Where(p => p.Method == m).Sum(p => p.CpuMs));
        var total = cpu.Values.Sum();
        var shares = new JsonObject();
        foreach (var m in methods) shares[m] = total > 0 ? cpu[m] / total : 0.0;
        return shares;
    }

    /// Runs `kinds` in turn, `slice(meter, kind)` each, on `ctx.Threads` threads named
    /// "prefix-N" until the measured seconds are over, each kind's time its own phase (named and
    /// timed as the kind); returns each kind's declared share, an equal split. The workloads that
    /// compare kinds of code in CPU slices (generics, dynamic-code) run on this.
    public JsonObject RunKindsInTurn(string[] kinds, string prefix, Action<PhaseMeter, int> slice)
    {
        RunThreads(Math.Max(1, Threads), prefix, _ =>
        {
            var meters = kinds.Select(k => new PhaseMeter(k, k)).ToArray();
            while (Clock.Elapsed.TotalSeconds < Seconds)
            {
                for (var kind = 0; kind < kinds.Length; kind++) slice(meters[kind], kind);
            }
            foreach (var m in meters) AddPhase(m.Record());
        });
        var declared = new JsonObject();
        foreach (var k in kinds) declared[k] = 1.0 / kinds.Length;
        return declared;
    }

    /// Runs `body` on `count` named threads ("prefix-0" …) and waits for them.
    public void RunThreads(int count, string prefix, Action<int> body)
    {
        Exception? failure = null;
        var threads = Enumerable.Range(0, count).Select(i => new Thread(() =>
        {
            try { body(i); }
            catch (Exception e) { failure ??= e; }
        }) { Name = $"{prefix}-{i}", IsBackground = true }).ToList();
        foreach (var t in threads) t.Start();
        foreach (var t in threads) t.Join();
        if (failure is not null) throw new InvalidOperationException($"a {prefix} thread failed", failure);
    }
}

/// One measured stretch of one method on one thread.
public sealed record PhaseRecord(string Name, string Method, string Thread, int Tid, double WallMs, double CpuMs)
{
    public JsonObject ToJson() => new()
    {
        ["name"] = Name, ["method"] = Method, ["thread"] = Thread, ["tid"] = Tid,
        ["wall_ms"] = WallMs, ["cpu_ms"] = CpuMs,
    };
}

/// Accumulates wall and thread CPU time of repeated calls of one method on the current thread.
public sealed class PhaseMeter
{
    readonly string _name, _method;
    double _wallMs, _cpuMs;
    long _calls;

    public PhaseMeter(string name, string method)
    {
        _name = name;
        _method = method;
    }

    public long Calls => _calls;
    public double WallMs => _wallMs;
    public double CpuMs => _cpuMs;

    public void Measure(Action action)
    {
        var wall = Stopwatch.GetTimestamp();
        var cpu = Native.ThreadCpuMs();
        action();
        _cpuMs += Native.ThreadCpuMs() - cpu;
        _wallMs += Stopwatch.GetElapsedTime(wall).TotalMilliseconds;
        _calls++;
    }

    /// Adds a stretch measured by the caller (when a lambda frame would be in the way).
    public void Add(double wallMs, double cpuMs)
    {
        _wallMs += wallMs;
        _cpuMs += cpuMs;
        _calls++;
    }

    public PhaseRecord Record() =>
        new(_name, _method, Thread.CurrentThread.Name ?? "main", Native.Tid(), _wallMs, _cpuMs);
}

public static class WorkloadHost
{
    /// Runs a workload under the engine's protocol; returns the process exit code.
    [MethodImpl(MethodImplOptions.NoInlining)]
    public static int Run(string name, string[] args, Action<WorkloadContext> body, Action<WorkloadContext>? warmUp = null)
    {
        Options options;
        try
        {
            options = Options.Parse(args);
        }
        catch (ArgumentException e)
        {
            Console.Error.WriteLine($"{name}: {e.Message}");
            return 2;
        }

        var ctx = new WorkloadContext(name, options);
        warmUp?.Invoke(ctx);

        var pid = Environment.ProcessId;
        Console.Out.WriteLine($"TRACELAB READY pid={pid} workload={name}");
        Console.Out.Flush();

        var goTimeout = options.GetDouble("go-timeout", 120);
        if (options.GoFile is { } goFile && !WaitForGoFile(goFile, goTimeout))
        {
            Console.Error.WriteLine($"{name}: the go-file {goFile} did not appear within {goTimeout} s; giving up (exit 3)");
            return 3;
        }

        var gen0 = GC.CollectionCount(0);
        var gen1 = GC.CollectionCount(1);
        var gen2 = GC.CollectionCount(2);
        var allocated = GC.GetTotalAllocatedBytes(precise: true);
        ctx.Clock.Start();
        body(ctx);
        ctx.Clock.Stop();
        var allocatedAfter = GC.GetTotalAllocatedBytes(precise: true);
        int d0 = GC.CollectionCount(0) - gen0, d1 = GC.CollectionCount(1) - gen1, d2 = GC.CollectionCount(2) - gen2;

        var truth = new JsonObject
        {
            ["workload"] = name,
            ["pid"] = pid,
            ["runtime_version"] = Environment.Version.ToString(),
            ["framework_description"] = System.Runtime.InteropServices.RuntimeInformation.FrameworkDescription,
            ["args"] = new JsonArray(args.Select(a => (JsonNode?)JsonValue.Create(a)).ToArray()),
            ["seconds"] = options.Seconds,
            ["threads"] = options.Threads,
            ["wall_ms"] = ctx.Clock.Elapsed.TotalMilliseconds,
            ["phases"] = new JsonArray(ctx.Phases.Select(p => (JsonNode?)p.ToJson()).ToArray()),
        };
        foreach (var (key, value) in ctx.Truth.ToList())
        {
            ctx.Truth.Remove(key);
            truth[key] = value;
        }
        // Every GC counts in gen0 (a gen2 GC collects gen0 and gen1 too), so gen0 = all GCs.
        var gc = truth["gc"] as JsonObject ?? new JsonObject();
        gc["collections"] = new JsonObject { ["gen0"] = d0, ["gen1"] = d1, ["gen2"] = d2 };
        gc["collections_total"] = d0;
        gc["allocated_bytes"] = allocatedAfter - allocated;
        truth["gc"] = gc;

        if (options.TruthPath is { } path) WriteAtomically(path, truth);
        Console.Out.WriteLine("TRACELAB DONE");
        Console.Out.Flush();
        return 0;
    }

    static bool WaitForGoFile(string path, double timeoutSeconds)
    {
        var deadline = Stopwatch.StartNew();
        while (!File.Exists(path))
        {
            if (deadline.Elapsed.TotalSeconds > timeoutSeconds) return false;
            Thread.Sleep(5);
        }
        return true;
    }

    static void WriteAtomically(string path, JsonObject truth)
    {
        var full = Path.GetFullPath(path);
        Directory.CreateDirectory(Path.GetDirectoryName(full)!);
        var temp = full + $".{Environment.ProcessId}.tmp";
        File.WriteAllText(temp, truth.ToJsonString(new JsonSerializerOptions { WriteIndented = true }));
        File.Move(temp, full, overwrite: true);
    }
}
