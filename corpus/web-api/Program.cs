// A minimal API with one CPU-bound and one blocking route. It knows nothing of any profiler.
using System.Diagnostics;
using System.Runtime.CompilerServices;

var app = WebApplication.CreateBuilder(args).Build();
app.MapGet("/cpu", () => Routes.CpuRoute(20));
app.MapGet("/blocked", () => Routes.BlockedRoute(20));
app.Run();

static class Routes
{
    [MethodImpl(MethodImplOptions.NoInlining)]
    public static string CpuRoute(int ms)
    {
        var start = Stopwatch.GetTimestamp();
        double x = 1.0;
        while (Stopwatch.GetElapsedTime(start).TotalMilliseconds < ms)
        {
            for (int i = 0; i < 1000; i++) x = x * 1.0001 + 1e-9;
        }
        return x > 0 ? "cpu" : "?";
    }

    [MethodImpl(MethodImplOptions.NoInlining)]
    public static string BlockedRoute(int ms)
    {
        Thread.Sleep(ms);
        return "blocked";
    }
}
