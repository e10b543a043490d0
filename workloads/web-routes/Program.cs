// web-routes: an ASP.NET Core minimal API on 127.0.0.1:--port (default 5080; 0 picks a free
// port) with two routes that take about the same wall time but differ in CPU:
//   /cpu      → CpuRoute: about --cpu-ms (100) of thread CPU time in a loop;
//   /blocked  → BlockedRoute: Task.Delay(--blocked-ms, 100).Wait(), a thread blocked, no CPU;
//   /stop     → ends the run early.
// Prints "TRACELAB LISTENING http://127.0.0.1:PORT" before READY; serves until --seconds after go.
using System.Collections.Concurrent;
using System.Diagnostics;
using System.Runtime.CompilerServices;
using System.Text.Json.Nodes;

namespace Tracelab.Workloads;

public static class WebRoutes
{
    sealed class RouteStats
    {
        public long Requests;
        public double TotalMs, CpuMs;
        public readonly object Lock = new();

        public void Add(double wallMs, double cpuMs)
        {
            lock (Lock)
            {
                Requests++;
                TotalMs += wallMs;
                CpuMs += cpuMs;
            }
        }

        public JsonObject ToJson()
        {
            lock (Lock) return new JsonObject { ["requests"] = Requests, ["total_ms"] = TotalMs, ["cpu_ms"] = CpuMs };
        }
    }

    static readonly ConcurrentDictionary<string, RouteStats> Stats = new();

    public static int Main(string[] args)
    {
        WebApplication? app = null;
        var stop = new CancellationTokenSource();
        return WorkloadHost.Run("web-routes", args, ctx => Serve(ctx, app!, stop), ctx => app = Start(ctx, stop));
    }

    [MethodImpl(MethodImplOptions.NoInlining)]
    static WebApplication Start(WorkloadContext ctx, CancellationTokenSource stop)
    {
        var port = ctx.Options.GetInt("port", 5080);
        var cpuMs = ctx.Options.GetDouble("cpu-ms", 100);
        var blockedMs = ctx.Options.GetInt("blocked-ms", 100);

        var builder = WebApplication.CreateSlimBuilder();
        // stdout carries the engine's protocol lines; keep the framework's logging off it.
        builder.Logging.ClearProviders();
        builder.WebHost.UseKestrel(k => k.Listen(System.Net.IPAddress.Loopback, port));
        var app = builder.Build();
        app.MapGet("/cpu", () => Measure("cpu", () => CpuRoute(cpuMs)));
        app.MapGet("/blocked", () => Measure("blocked", () => BlockedRoute(blockedMs)));
        app.MapGet("/stop", () =>
        {
            stop.Cancel();
            return "stopping\n";
        });
        app.StartAsync().GetAwaiter().GetResult();
        var address = app.Urls.FirstOrDefault() ?? $"http://127.0.0.1:{port}";
        Console.Out.WriteLine($"TRACELAB LISTENING {address}");
        Console.Out.Flush();
        return app;
    }

    [MethodImpl(MethodImplOptions.NoInlining)]
    static void Serve(WorkloadContext ctx, WebApplication app, CancellationTokenSource stop)
    {
        var left = TimeSpan.FromSeconds(ctx.Seconds) - ctx.Clock.Elapsed;
        if (left > TimeSpan.Zero) stop.Token.WaitHandle.WaitOne(left);
        app.StopAsync().GetAwaiter().GetResult();

        var routes = new JsonObject();
        foreach (var name in new[] { "cpu", "blocked" }) routes[name] = Stats.GetOrAdd(name, _ => new RouteStats()).ToJson();
        ctx.Truth["routes"] = routes;
        // Shares of request time per route: what a thread-time sampler (SampleProfiler) should see.
        var cpuMs = Stats.GetOrAdd("cpu", _ => new RouteStats()).TotalMs;
        var blockedMs = Stats.GetOrAdd("blocked", _ => new RouteStats()).TotalMs;
        var allMs = cpuMs + blockedMs;
        ctx.Truth["shares"] = new JsonObject
        {
            ["route_time"] = new JsonObject
            {
                ["cpu"] = allMs > 0 ? cpuMs / allMs : 0,
                ["blocked"] = allMs > 0 ? blockedMs / allMs : 0,
            },
        };
        ctx.Truth["methods"] = new JsonObject { ["cpu"] = nameof(CpuRoute), ["blocked"] = nameof(BlockedRoute) };
        ctx.Truth["stopped_by_request"] = stop.IsCancellationRequested;
    }

    static string Measure(string route, Func<string> handler)
    {
        var wall = Stopwatch.GetTimestamp();
        var cpu = Native.ThreadCpuMs();
        var body = handler();
        Stats.GetOrAdd(route, _ => new RouteStats()).Add(Stopwatch.GetElapsedTime(wall).TotalMilliseconds, Native.ThreadCpuMs() - cpu);
        return body;
    }

    [MethodImpl(MethodImplOptions.NoInlining)]
    static string CpuRoute(double cpuMs)
    {
        var end = Native.ThreadCpuMs() + cpuMs;
        ulong x = 88172645463325252UL;
        do
        {
            for (var i = 0; i < 40_000; i++) x = x * 6364136223846793005UL + 1442695040888963407UL;
        } while (Native.ThreadCpuMs() < end);
        return $"cpu {x & 0xff}\n";
    }

    [MethodImpl(MethodImplOptions.NoInlining)]
    static string BlockedRoute(int blockedMs)
    {
        // Deliberately sync-over-async: the request thread blocks, which is what an off-CPU
        // profiler should find and a CPU profiler should not.
        Task.Delay(blockedMs).Wait();
        return "blocked\n";
    }
}
