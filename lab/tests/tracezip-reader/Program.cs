// TraceZipReader FILE.trace.zip OUT.json
// What PerfView sees in a perfcollect trace.zip, through TraceEvent 4.0.0's own readers:
//   perf.data.txt  -> LinuxPerfScriptStackSource (perf script parser): samples, leaf frame counts,
//                     samples per CPU (-1: the line has no [cpu] field)
//   perfinfo-*.map -> LinuxPerfScriptEventParser.ParsePerfInfoFile: each image's GUID and base
//   lttngTrace/    -> CtfTraceEventSource: events per "<provider>/<event id>", with TraceEvent's names
using System.IO.Compression;
using System.Text.Json;
using Microsoft.Diagnostics.Tracing;
using Microsoft.Diagnostics.Tracing.StackSources;

static class TraceZipReader
{
    static int Main(string[] a)
    {
        if (a.Length != 2) { Console.Error.WriteLine("usage: TraceZipReader FILE.trace.zip OUT.json"); return 2; }
        string path = a[0];
        bool hasPerf, hasCtf;
        using (var zip = ZipFile.OpenRead(path))
        {
            hasPerf = zip.Entries.Any(e => e.FullName.EndsWith(".data.txt"));
            hasCtf = zip.Entries.Any(e => e.Name == "metadata");
        }
        long samples = 0;
        var leaves = new Dictionary<string, long>();
        var cpus = new SortedDictionary<int, long>();
        var perfinfoGuids = new Dictionary<string, string>();
        var perfinfoBases = new Dictionary<string, ulong>();
        using (var zip = ZipFile.OpenRead(path))
        {
            foreach (var e in zip.Entries.Where(e => e.Name.StartsWith("perfinfo-") && e.Name.EndsWith(".map")))
            {
                using var s = e.Open();
                new LinuxPerfScriptEventParser().ParsePerfInfoFile(s, perfinfoGuids, perfinfoBases);
            }
        }
        if (hasPerf)
        {
            var stacks = new LinuxPerfScriptStackSource(path, false);
            stacks.ForEach(s =>
            {
                samples++;
                int cpu = stacks.GetLinuxPerfScriptSampleByIndex(s.SampleIndex).CpuNumber;
                cpus[cpu] = cpus.GetValueOrDefault(cpu) + 1;
                var name = s.StackIndex == Microsoft.Diagnostics.Tracing.Stacks.StackSourceCallStackIndex.Invalid
                    ? "" : stacks.GetFrameName(stacks.GetFrameIndex(s.StackIndex), false);
                leaves[name] = leaves.GetValueOrDefault(name) + 1;
            });
        }
        var counts = new SortedDictionary<string, long>();
        var names = new SortedDictionary<string, string>();
        if (hasCtf)
        {
            using var ctf = new CtfTraceEventSource(path);
            ctf.AllEvents += e =>
            {
                string key = $"{e.ProviderName}/{(int)e.ID}";
                counts[key] = counts.GetValueOrDefault(key) + 1;
                names[key] = e.EventName;
            };
            ctf.Process();
        }
        var result = new
        {
            samples,
            top_leaf = leaves.OrderByDescending(kv => kv.Value).ThenBy(kv => kv.Key).Take(50)
                .Select(kv => new object[] { kv.Key, kv.Value }).ToList(),
            counts,
            names,
            cpus = cpus.ToDictionary(kv => kv.Key.ToString(), kv => kv.Value),
            perfinfo = perfinfoGuids.ToDictionary(kv => kv.Key, kv => new { guid = kv.Value, base_address = perfinfoBases.GetValueOrDefault(kv.Key) }),
        };
        File.WriteAllText(a[1], JsonSerializer.Serialize(result, new JsonSerializerOptions { WriteIndented = true }));
        return 0;
    }
}
