// A small data pipeline written the way application code is: generic classes and methods
// instantiated over several types, async methods awaiting each other, iterators, lambdas and
// local functions. It runs for the seconds given and exits by itself, printing its totals. It
// knows nothing of any profiler.
using System.Diagnostics;
using System.Globalization;
using System.Runtime.CompilerServices;

var seconds = args.Length > 0 ? double.Parse(args[0], CultureInfo.InvariantCulture) : 4.0;
var clock = Stopwatch.StartNew();
long rounds = 0;
double total = 0;
while (clock.Elapsed.TotalSeconds < seconds)
{
    total += await Pipeline.RunAsync(rounds++);
}
Console.WriteLine(string.Create(CultureInfo.InvariantCulture, $"{rounds} rounds, total {total:F1}"));

static class Pipeline
{
    public static async Task<double> RunAsync(long round)
    {
        var ints = new Stage<int>(x => x * 3 + 1);
        var longs = new Stage<long>(x => x ^ (x >> 3));
        var sumInts = await SumAsync(ints, Numbers.Upto((int)(round % 7) + 2_000));
        var sumLongs = await SumAsync(longs, Numbers.Upto(1_500L + round % 5));
        var labels = Describe(Numbers.Upto(200)).Count(l => l.EndsWith('0'));
        return Accumulate(sumInts, sumLongs) + labels;

        static double Accumulate(double a, double b) => Math.Sqrt(a * a + b * b);
    }

    [MethodImpl(MethodImplOptions.NoInlining)]
    static async Task<double> SumAsync<T>(Stage<T> stage, IEnumerable<T> items) where T : struct, IConvertible
    {
        double sum = 0;
        var n = 0;
        foreach (var item in stage.Apply(items))
        {
            sum += Convert.ToDouble(item, CultureInfo.InvariantCulture);
            if (++n % 500 == 0) await Task.Yield();
        }
        return sum;
    }

    static IEnumerable<string> Describe(IEnumerable<int> items)
    {
        foreach (var i in items)
        {
            yield return Format(i);
        }

        string Format(int i) => i % 3 == 0 ? $"fizz{i}" : i.ToString(CultureInfo.InvariantCulture);
    }
}

sealed class Stage<T>(Func<T, T> step) where T : struct
{
    public IEnumerable<T> Apply(IEnumerable<T> items)
    {
        foreach (var item in items)
        {
            var x = item;
            for (var i = 0; i < 40; i++) x = step(x);
            yield return x;
        }
    }
}

static class Numbers
{
    public static IEnumerable<T> Upto<T>(T count) where T : struct, IConvertible
    {
        var n = count.ToInt64(CultureInfo.InvariantCulture);
        for (long i = 0; i < n; i++)
        {
            yield return (T)Convert.ChangeType(i, typeof(T), CultureInfo.InvariantCulture);
        }
    }
}
