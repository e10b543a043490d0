// A console app that spins in two methods, 3:1, then reports how long each ran in its own
// format. It knows nothing of any profiler.
using System.Diagnostics;
using System.Globalization;
using System.Runtime.CompilerServices;

var output = args.Length > 0 ? args[0] : "spin.json";
var seconds = args.Length > 1 ? double.Parse(args[1], CultureInfo.InvariantCulture) : 6.0;
var (alpha, beta) = Spin.Run(TimeSpan.FromSeconds(seconds));
File.WriteAllText(output, string.Create(CultureInfo.InvariantCulture,
    $"{{\"alpha_s\": {alpha.TotalSeconds:F4}, \"beta_s\": {beta.TotalSeconds:F4}}}"));
Console.WriteLine($"spun {alpha.TotalSeconds:F2} s in Alpha and {beta.TotalSeconds:F2} s in Beta");

static class Spin
{
    static double sink;

    public static (TimeSpan, TimeSpan) Run(TimeSpan total)
    {
        var clock = Stopwatch.StartNew();
        TimeSpan alpha = TimeSpan.Zero, beta = TimeSpan.Zero;
        while (clock.Elapsed < total)
        {
            alpha += Alpha(TimeSpan.FromMilliseconds(15));
            beta += Beta(TimeSpan.FromMilliseconds(5));
        }
        return (alpha, beta);
    }

    [MethodImpl(MethodImplOptions.NoInlining)]
    static TimeSpan Alpha(TimeSpan slice) => Burn(slice, 1.0001);

    [MethodImpl(MethodImplOptions.NoInlining)]
    static TimeSpan Beta(TimeSpan slice) => Burn(slice, 0.9999);

    [MethodImpl(MethodImplOptions.AggressiveInlining)]
    static TimeSpan Burn(TimeSpan slice, double factor)
    {
        var start = Stopwatch.GetTimestamp();
        double x = 1.0;
        while (Stopwatch.GetElapsedTime(start) < slice)
        {
            for (int i = 0; i < 1000; i++) x = x * factor + 1e-9;
        }
        sink += x;
        return Stopwatch.GetElapsedTime(start);
    }
}
