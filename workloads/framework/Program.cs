// framework: spends its CPU in precompiled (ReadyToRun) framework code with a declared split
// (--split 50,30,20 by default): System.Text.Json serialization, Regex matching and LINQ, each
// driven from its own app method, interleaved in short slices of thread CPU time.
// Stack: Main → Run → Phase → JsonPhase | RegexPhase | LinqPhase → System.* frames.
using System.Runtime.CompilerServices;
using System.Text.Json;
using System.Text.Json.Nodes;
using System.Text.RegularExpressions;

namespace Tracelab.Workloads;

public sealed record Order(int Id, string Customer, double Amount, string[] Tags, DateTime Placed);

public static class Framework
{
    const double SliceCpuMs = 30;

    static readonly Order[] Orders = Enumerable.Range(0, 200)
        .Select(i => new Order(i, $"customer-{i % 37}", i * 1.25, new[] { "a", $"tag{i % 7}", "z" }, new DateTime(2026, 1, 1).AddMinutes(i)))
        .ToArray();

    static readonly string Text = string.Join(' ', Enumerable.Range(0, 400)
        .Select(i => i % 5 == 0 ? $"user{i}@example{i % 9}.org" : $"word{i} 2026-{1 + i % 12:00}-{1 + i % 28:00}"));

    // Interpreted (not RegexOptions.Compiled): the matching runs in the framework's precompiled
    // interpreter rather than in code generated at run time.
    static readonly Regex Email = new(@"\b[a-z0-9]+@[a-z0-9]+\.(org|com)\b");
    static readonly Regex Date = new(@"\b(\d{4})-(\d{2})-(\d{2})\b");

    static readonly int[] Numbers = Enumerable.Range(0, 5000).Select(i => (i * 7919) % 10007).ToArray();

    public static int Main(string[] args) => WorkloadHost.Run("framework", args, Run, WarmUp);

    [MethodImpl(MethodImplOptions.NoInlining)]
    static void WarmUp(WorkloadContext ctx)
    {
        JsonPhase(5);
        RegexPhase(5);
        LinqPhase(5);
    }

    [MethodImpl(MethodImplOptions.NoInlining)]
    static void Run(WorkloadContext ctx)
    {
        var split = ctx.Options.GetDoubles("split", new[] { 50.0, 30.0, 20.0 }, 3);
        var total = split.Sum();
        var budgets = split.Select(s => SliceCpuMs * s / total).ToArray();
        ctx.RunThreads(Math.Max(1, ctx.Threads), "fw", _ =>
        {
            var meters = new[]
            {
                new PhaseMeter("json", nameof(JsonPhase)),
                new PhaseMeter("regex", nameof(RegexPhase)),
                new PhaseMeter("linq", nameof(LinqPhase)),
            };
            while (ctx.Clock.Elapsed.TotalSeconds < ctx.Seconds)
            {
                for (var k = 0; k < 3; k++) Phase(meters[k], k, budgets[k]);
            }
            foreach (var m in meters) ctx.AddPhase(m.Record());
        });
        ctx.Truth["shares"] = new JsonObject
        {
            ["cpu"] = ctx.CpuShares(nameof(JsonPhase), nameof(RegexPhase), nameof(LinqPhase)),
            ["declared"] = new JsonObject
            {
                ["JsonPhase"] = split[0] / total, ["RegexPhase"] = split[1] / total, ["LinqPhase"] = split[2] / total,
            },
        };
    }

    [MethodImpl(MethodImplOptions.NoInlining)]
    static void Phase(PhaseMeter meter, int which, double cpuBudgetMs)
    {
        if (cpuBudgetMs <= 0) return;
        var wall = System.Diagnostics.Stopwatch.GetTimestamp();
        var cpu = Native.ThreadCpuMs();
        var sink = which switch
        {
            0 => JsonPhase(cpuBudgetMs),
            1 => RegexPhase(cpuBudgetMs),
            _ => LinqPhase(cpuBudgetMs),
        };
        meter.Add(System.Diagnostics.Stopwatch.GetElapsedTime(wall).TotalMilliseconds, Native.ThreadCpuMs() - cpu);
        GC.KeepAlive(sink);
    }

    [MethodImpl(MethodImplOptions.NoInlining)]
    static long JsonPhase(double cpuBudgetMs)
    {
        var end = Native.ThreadCpuMs() + cpuBudgetMs;
        long bytes = 0;
        do
        {
            var json = JsonSerializer.Serialize(Orders);
            var back = JsonSerializer.Deserialize<Order[]>(json);
            bytes += json.Length + (back?.Length ?? 0);
        } while (Native.ThreadCpuMs() < end);
        return bytes;
    }

    [MethodImpl(MethodImplOptions.NoInlining)]
    static long RegexPhase(double cpuBudgetMs)
    {
        var end = Native.ThreadCpuMs() + cpuBudgetMs;
        long matches = 0;
        do
        {
            matches += Email.Matches(Text).Count;
            foreach (Match m in Date.Matches(Text)) matches += m.Groups[2].Length;
        } while (Native.ThreadCpuMs() < end);
        return matches;
    }

    [MethodImpl(MethodImplOptions.NoInlining)]
    static long LinqPhase(double cpuBudgetMs)
    {
        var end = Native.ThreadCpuMs() + cpuBudgetMs;
        long sum = 0;
        do
        {
            sum += Numbers.Where(n => n % 3 != 0)
                .Select(n => n * 2)
                .OrderBy(n => n)
                .GroupBy(n => n % 17)
                .Sum(g => g.Count());
        } while (Native.ThreadCpuMs() < end);
        return sum;
    }
}
