using System.Globalization;

namespace Tracelab.Workloads;

/// `--key value` command-line options: the engine's (--seconds, --threads, --truth, --go-file)
/// plus each workload's own, read with the typed getters.
public sealed class Options
{
    readonly Dictionary<string, string> _values = new(StringComparer.Ordinal);

    public double Seconds => GetDouble("seconds", 5);
    public int Threads => GetInt("threads", 1);
    public string? TruthPath => GetString("truth");
    public string? GoFile => GetString("go-file");

    public static Options Parse(string[] args)
    {
        var options = new Options();
        for (var i = 0; i < args.Length; i++)
        {
            var arg = args[i];
            if (!arg.StartsWith("--", StringComparison.Ordinal) || arg.Length == 2)
                throw new ArgumentException($"unexpected argument `{arg}` (options are --key value)");
            var key = arg[2..];
            var eq = key.IndexOf('=');
            if (eq >= 0)
            {
                options._values[key[..eq]] = key[(eq + 1)..];
            }
            else
            {
                if (i + 1 >= args.Length) throw new ArgumentException($"option `{arg}` needs a value");
                options._values[key] = args[++i];
            }
        }
        return options;
    }

    public string? GetString(string key) => _values.TryGetValue(key, out var v) ? v : null;

    public int GetInt(string key, int fallback) =>
        _values.TryGetValue(key, out var v)
            ? int.TryParse(v, NumberStyles.Integer, CultureInfo.InvariantCulture, out var n) && n >= 0
                ? n
                : throw new ArgumentException($"--{key} needs a non-negative integer, got `{v}`")
            : fallback;

    public double GetDouble(string key, double fallback) =>
        _values.TryGetValue(key, out var v)
            ? double.TryParse(v, NumberStyles.Float, CultureInfo.InvariantCulture, out var d) && d >= 0
                ? d
                : throw new ArgumentException($"--{key} needs a non-negative number, got `{v}`")
            : fallback;

    /// A comma-separated list of non-negative numbers (`--split 50,30,20`).
    public double[] GetDoubles(string key, double[] fallback, int expectedCount)
    {
        if (!_values.TryGetValue(key, out var v)) return fallback;
        var parts = v.Split(',');
        var numbers = new double[parts.Length];
        for (var i = 0; i < parts.Length; i++)
        {
            if (!double.TryParse(parts[i], NumberStyles.Float, CultureInfo.InvariantCulture, out numbers[i]) || numbers[i] < 0)
                throw new ArgumentException($"--{key} needs {expectedCount} comma-separated non-negative numbers, got `{v}`");
        }
        if (numbers.Length != expectedCount || numbers.Sum() <= 0)
            throw new ArgumentException($"--{key} needs {expectedCount} comma-separated numbers with a positive sum, got `{v}`");
        return numbers;
    }
}
