// exceptions: throws and catches exactly --count WorkloadExceptions (default 1000) with the
// messages "boom 0", "boom 1", "boom 2" in turn, spread evenly over --seconds.
// Stack of a throw: Main → Run → CatchLoop → ThrowOne.
using System.Runtime.CompilerServices;
using System.Text.Json.Nodes;

namespace Tracelab.Workloads;

public static class Exceptions
{
    public static int Main(string[] args) => WorkloadHost.Run("exceptions", args, Run, WarmUp);

    // The runtime's first throw loads exception-handling machinery; do that before READY so that
    // the measured phase throws only the counted exceptions of our type.
    [MethodImpl(MethodImplOptions.NoInlining)]
    static void WarmUp(WorkloadContext ctx)
    {
        try { throw new InvalidOperationException("warm-up"); }
        catch (InvalidOperationException) { }
    }

    [MethodImpl(MethodImplOptions.NoInlining)]
    static void Run(WorkloadContext ctx)
    {
        var count = ctx.Options.GetInt("count", 1000);
        var kinds = Math.Max(1, ctx.Options.GetInt("messages", 3));
        var byTypeMessage = new SortedDictionary<string, int>(StringComparer.Ordinal);
        var meter = new PhaseMeter("throw", nameof(CatchLoop));
        meter.Measure(() => CatchLoop(ctx, count, kinds, byTypeMessage));
        ctx.AddPhase(meter.Record());

        var map = new JsonObject();
        foreach (var (key, n) in byTypeMessage) map[key] = n;
        ctx.Truth["exceptions"] = new JsonObject
        {
            ["total"] = byTypeMessage.Values.Sum(),
            ["type"] = typeof(WorkloadException).FullName,
            ["by_type_message"] = map,
        };
    }

    [MethodImpl(MethodImplOptions.NoInlining)]
    static void CatchLoop(WorkloadContext ctx, int count, int kinds, SortedDictionary<string, int> byTypeMessage)
    {
        for (var i = 0; i < count; i++)
        {
            // Spread the throws over the run, in batches of 10 to keep the sleeps coarse.
            if (i % 10 == 0)
            {
                var wait = TimeSpan.FromSeconds(ctx.Seconds * i / Math.Max(1, count)) - ctx.Clock.Elapsed;
                if (wait > TimeSpan.Zero) Thread.Sleep(wait);
            }
            try
            {
                ThrowOne(i % kinds);
            }
            catch (WorkloadException e)
            {
                var key = $"{e.GetType().FullName}: {e.Message}";
                byTypeMessage[key] = byTypeMessage.GetValueOrDefault(key) + 1;
            }
        }
    }

    [MethodImpl(MethodImplOptions.NoInlining)]
    static void ThrowOne(int kind) => throw new WorkloadException($"boom {kind}");
}
