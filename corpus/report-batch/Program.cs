// A nightly report job in two phases, one after the other: it parses records for a while, then
// renders the report, then exits. It times each phase with a stopwatch, and with the CPU time
// the process used meanwhile, and writes the seconds to the file named by its first argument
// (timings.json). Phase lengths: 2nd and 3rd arguments
// (parse seconds, default 3; render seconds, default 1). It knows nothing of any profiler.
using System.Diagnostics;
using System.Globalization;
using System.Runtime.CompilerServices;
using System.Text;
using System.Text.Json;

var output = args.Length > 0 ? args[0] : "timings.json";
var parseFor = TimeSpan.FromSeconds(args.Length > 1 ? double.Parse(args[1], CultureInfo.InvariantCulture) : 3.0);
var renderFor = TimeSpan.FromSeconds(args.Length > 2 ? double.Parse(args[2], CultureInfo.InvariantCulture) : 1.0);

var self = Process.GetCurrentProcess();
var cpuAtStart = self.TotalProcessorTime;
var parse = Stopwatch.StartNew();
var records = Job.Parse(parseFor);
parse.Stop();
self.Refresh();
var cpuAfterParse = self.TotalProcessorTime;
var render = Stopwatch.StartNew();
var pages = Job.Render(records, renderFor);
render.Stop();
self.Refresh();
var cpuAfterRender = self.TotalProcessorTime;

File.WriteAllText(output, JsonSerializer.Serialize(new Dictionary<string, double>
{
    ["parse_s"] = parse.Elapsed.TotalSeconds,
    ["render_s"] = render.Elapsed.TotalSeconds,
    ["parse_cpu_s"] = (cpuAfterParse - cpuAtStart).TotalSeconds,
    ["render_cpu_s"] = (cpuAfterRender - cpuAfterParse).TotalSeconds,
}));
Console.WriteLine(string.Create(CultureInfo.InvariantCulture,
    $"parsed {records.Count} records in {parse.Elapsed.TotalSeconds:F2} s, rendered {pages} pages in {render.Elapsed.TotalSeconds:F2} s"));

static class Job
{
    /// Parses CSV-like lines until `budget` of wall time has passed.
    [MethodImpl(MethodImplOptions.NoInlining)]
    public static List<(int Id, double Amount)> Parse(TimeSpan budget)
    {
        var clock = Stopwatch.StartNew();
        var records = new List<(int, double)>();
        var i = 0;
        while (clock.Elapsed < budget)
        {
            var line = string.Create(CultureInfo.InvariantCulture, $"{i},{i * 0.37:F2},item-{i % 97}");
            var parts = line.Split(',');
            records.Add((int.Parse(parts[0], CultureInfo.InvariantCulture), double.Parse(parts[1], CultureInfo.InvariantCulture)));
            if (records.Count > 50_000) records.RemoveRange(0, 25_000);
            i++;
        }
        return records;
    }

    /// Renders pages of the records until `budget` of wall time has passed.
    [MethodImpl(MethodImplOptions.NoInlining)]
    public static int Render(List<(int Id, double Amount)> records, TimeSpan budget)
    {
        var clock = Stopwatch.StartNew();
        var pages = 0;
        var page = new StringBuilder();
        while (clock.Elapsed < budget)
        {
            page.Clear();
            foreach (var (id, amount) in records.Take(200))
            {
                page.Append(id).Append(" | ").Append(amount.ToString("N2", CultureInfo.InvariantCulture)).Append('\n');
            }
            pages++;
        }
        return pages;
    }
}
