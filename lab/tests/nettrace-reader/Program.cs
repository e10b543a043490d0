// NettraceReader FILE.nettrace OUT.json
// Every event of the runtime's providers (Microsoft-Windows-DotNETRuntime*) as TraceEvent 4.0.0
// reads it: provider, thread, id, version, TraceEvent's event name, and each payload field by TraceEvent's name
// with its value as text (integers and enums in decimal, floating point round-trip, strings as
// they are), one JSON line per event, in the order TraceEvent delivers them.
using System.Globalization;
using System.Text.Json;
using Microsoft.Diagnostics.Tracing;

static class NettraceReader
{
    const string Runtime = "Microsoft-Windows-DotNETRuntime";

    static int Main(string[] a)
    {
        if (a.Length != 2) { Console.Error.WriteLine("usage: NettraceReader FILE.nettrace OUT.json"); return 2; }
        using var output = new StreamWriter(a[1]);
        using var source = new EventPipeEventSource(a[0]);
        long n = 0;
        void Write(TraceEvent e)
        {
            if (!e.ProviderName.StartsWith(Runtime, StringComparison.Ordinal)) return;
            var fields = new List<string[]>();
            var names = e.PayloadNames ?? [];
            for (var i = 0; i < names.Length; i++) fields.Add([names[i], Text(e.PayloadValue(i))]);
            output.WriteLine(JsonSerializer.Serialize(new
            {
                provider = e.ProviderName,
                thread = e.ThreadID,
                id = (int)e.ID,
                version = e.Version,
                name = e.EventName,
                fields,
            }));
            n++;
        }
        // The CLR parser's typed events, and the ones it does not know through the metadata the
        // trace carries (the dynamic parser): each event reaches one of the two.
        source.Clr.All += Write;
        source.Dynamic.All += Write;
        source.Process();
        Console.WriteLine($"{n} runtime events");
        return 0;
    }

    static string Text(object? v) => v switch
    {
        null => "",
        string s => s,
        bool b => b ? "1" : "0",
        Enum en => Convert.ChangeType(en, Enum.GetUnderlyingType(en.GetType()), CultureInfo.InvariantCulture)!.ToString()!,
        double d => d.ToString("R", CultureInfo.InvariantCulture),
        float f => ((double)f).ToString("R", CultureInfo.InvariantCulture),
        byte[] bytes => Convert.ToHexString(bytes),
        IFormattable f => f.ToString(null, CultureInfo.InvariantCulture),
        _ => v.ToString() ?? "",
    };
}
