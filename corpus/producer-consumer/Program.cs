// Producers and consumers around one lock-guarded queue, then it exits by itself.
// First it hands a lock over 40 times on purpose (a thread that must wait for a lock the main
// thread holds: one contention each, counted by the runtime's Monitor.LockContentionCount),
// then three producers and two consumers share a queue for the seconds given. It prints its
// counts and writes them to the file named by its first argument (counts.json). It knows
// nothing of any profiler.
using System.Diagnostics;
using System.Globalization;
using System.Runtime.CompilerServices;
using System.Text.Json;

var output = args.Length > 0 ? args[0] : "counts.json";
var seconds = args.Length > 1 ? double.Parse(args[1], CultureInfo.InvariantCulture) : 3.0;

var before = Monitor.LockContentionCount;
var handoffs = Handoff.Run(40);
var afterHandoffs = Monitor.LockContentionCount;
var (produced, consumed) = Shop.Run(TimeSpan.FromSeconds(seconds), producers: 3, consumers: 2);
var counts = new Dictionary<string, long>
{
    ["handoffs"] = handoffs,
    ["handoff_contentions"] = afterHandoffs - before,
    ["contentions"] = Monitor.LockContentionCount - before,
    ["produced"] = produced,
    ["consumed"] = consumed,
};
File.WriteAllText(output, JsonSerializer.Serialize(counts));
Console.WriteLine(string.Join(", ", counts.Select(kv => $"{kv.Key} {kv.Value}")));

static class Handoff
{
    static readonly object Gate = new();

    /// Each round the main thread holds the gate until a second thread is blocked on it.
    public static int Run(int rounds)
    {
        for (var i = 0; i < rounds; i++)
        {
            Thread waiter;
            lock (Gate)
            {
                waiter = new Thread(Enter) { Name = $"waiter-{i}" };
                waiter.Start();
                var spin = Stopwatch.StartNew();
                while ((waiter.ThreadState & System.Threading.ThreadState.WaitSleepJoin) == 0 && spin.ElapsedMilliseconds < 2000)
                {
                    Thread.Sleep(1);
                }
                Thread.Sleep(5);
            }
            waiter.Join();
        }
        return rounds;
    }

    [MethodImpl(MethodImplOptions.NoInlining)]
    static void Enter()
    {
        lock (Gate) { }
    }
}

static class Shop
{
    static readonly Queue<Order> Orders = new();
    static readonly object Sync = new();
    static long produced, consumed;
    static volatile bool closing;

    record Order(int Id, double[] Lines);

    public static (long, long) Run(TimeSpan duration, int producers, int consumers)
    {
        var threads = new List<Thread>();
        for (var p = 0; p < producers; p++)
        {
            var id = p;
            threads.Add(new Thread(() => Produce(id)) { Name = $"producer-{p}" });
        }
        for (var c = 0; c < consumers; c++)
        {
            threads.Add(new Thread(Consume) { Name = $"consumer-{c}" });
        }
        threads.ForEach(t => t.Start());
        Thread.Sleep(duration);
        closing = true;
        lock (Sync) Monitor.PulseAll(Sync);
        threads.ForEach(t => t.Join());
        return (produced, consumed);
    }

    [MethodImpl(MethodImplOptions.NoInlining)]
    static void Produce(int id)
    {
        var rng = new Random(id);
        var n = 0;
        while (!closing)
        {
            var order = new Order(n++, Enumerable.Range(0, 16).Select(_ => rng.NextDouble()).ToArray());
            lock (Sync)
            {
                Orders.Enqueue(order);
                Monitor.Pulse(Sync);
            }
            Interlocked.Increment(ref produced);
            // An order takes a moment to prepare: producers arrive at the queue now and then.
            if (n % 16 == 0) Thread.Sleep(1);
        }
    }

    [MethodImpl(MethodImplOptions.NoInlining)]
    static void Consume()
    {
        while (true)
        {
            Order? order;
            lock (Sync)
            {
                while (Orders.Count == 0 && !closing) Monitor.Wait(Sync);
                if (!Orders.TryDequeue(out order)) return;
            }
            Price(order);
            Interlocked.Increment(ref consumed);
        }
    }

    [MethodImpl(MethodImplOptions.NoInlining)]
    static double Price(Order order)
    {
        double total = 0;
        foreach (var line in order.Lines) total += Math.Round(line * 100.0, 2);
        return total;
    }
}
