// A console app that validates orders for the seconds given, rejecting every third one by
// throwing Orders.RejectedOrderException from OrderValidator.Reject and catching it in the loop.
// It knows nothing of any profiler.
using System.Diagnostics;
using System.Globalization;
using System.Runtime.CompilerServices;

var seconds = args.Length > 0 ? double.Parse(args[0], CultureInfo.InvariantCulture) : 4.0;
var clock = Stopwatch.StartNew();
int accepted = 0, rejected = 0;
for (var order = 0; clock.Elapsed.TotalSeconds < seconds; order++)
{
    try
    {
        Orders.OrderValidator.Validate(order);
        accepted++;
    }
    catch (Orders.RejectedOrderException)
    {
        rejected++;
    }
    Thread.Sleep(5);
}
Console.WriteLine($"{accepted} orders accepted, {rejected} rejected");

namespace Orders
{
    sealed class RejectedOrderException(string message) : Exception(message);

    static class OrderValidator
    {
        [MethodImpl(MethodImplOptions.NoInlining)]
        public static void Validate(int order)
        {
            if (order % 3 == 0) Reject(order);
        }

        [MethodImpl(MethodImplOptions.NoInlining)]
        static void Reject(int order) => throw new RejectedOrderException($"order {order} rejected");
    }
}
