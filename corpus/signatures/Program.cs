// Methods whose parameters take the shapes a .NET signature can: function pointers (managed and
// unmanaged), `in` parameters of virtual and interface methods, a TypedReference, pointers, native
// ints, multi-dimensional and jagged arrays, nullables, tuples, spans, nested generic types, generic
// methods, explicit interface implementations, iterators, async methods, local functions, lambdas —
// and one type named outside ASCII (`Größe`). Each does a little work per call; the program loops
// over them for the seconds given (1st argument, default 4), exits by itself and prints its total.
// It knows nothing of any profiler.
using System;
using System.Collections;
using System.Collections.Generic;
using System.Diagnostics;
using System.Globalization;
using System.Runtime.CompilerServices;
using System.Threading.Tasks;

namespace Corpus.Signatures;

public interface IShape { double Area(in Vec v); }
public readonly struct Vec { public readonly double X, Y; public Vec(double x, double y) { X = x; Y = y; } }
public record Point(int X, int Y);
public abstract class Base { public abstract long Virt(in Vec v, ref readonly int r); }

public sealed class Derived : Base, IShape, IEnumerable<int>
{
    [MethodImpl(MethodImplOptions.NoInlining)] public override long Virt(in Vec v, ref readonly int r) => Work.Busy() + r;
    [MethodImpl(MethodImplOptions.NoInlining)] double IShape.Area(in Vec v) => Work.Busy() * v.X;
    IEnumerator<int> IEnumerable<int>.GetEnumerator() { for (int i = 0; i < 2; i++) { Work.Busy(); yield return i; } }
    IEnumerator IEnumerable.GetEnumerator() => ((IEnumerable<int>)this).GetEnumerator();
}

public class Outer<T>
{
    public class Inner<U>
    {
        [MethodImpl(MethodImplOptions.NoInlining)] public static long Both(T t, U u, Dictionary<T, List<U>> d) => Work.Busy();
    }
}

public static class Größe
{
    [MethodImpl(MethodImplOptions.NoInlining)] public static long Messen(int n) => Work.Busy() + n;
}

public static class Work
{
    /// About 50 µs of arithmetic, no loop the runtime would replace on the stack.
    [MethodImpl(MethodImplOptions.NoInlining)]
    public static long Busy() => Mix(Mix(Mix(Mix(Environment.TickCount64))));

    [MethodImpl(MethodImplOptions.NoInlining)]
    static long Mix(long x)
    {
        for (int i = 0; i < 2_000; i++) x = x * 6364136223846793005 + 1442695040888963407;
        return x & 0xff;
    }

    [MethodImpl(MethodImplOptions.NoInlining)] public static unsafe int Managed(delegate*<int, bool> f, int x) => (f(x) ? 1 : 0) + (int)Busy();
    [MethodImpl(MethodImplOptions.NoInlining)] public static unsafe int Unmanaged(delegate* unmanaged<byte*, Vec*, void> f, int x) => x + (f == null ? 1 : 0) + (int)Busy();
    [MethodImpl(MethodImplOptions.NoInlining)] public static unsafe int Cdecl(delegate* unmanaged[Cdecl]<long, nint> f, delegate*<string, object[], int>[] table) => table.Length + (int)Busy();
    [MethodImpl(MethodImplOptions.NoInlining)] public static long Arrays(int[,] a, int[][] j, string[,,] s, Point[] p) => Busy();
    [MethodImpl(MethodImplOptions.NoInlining)] public static unsafe long Pointers(int* p, Vec* v, void** pp, nint n, nuint u, char c, sbyte sb, ushort us, float f, decimal d) => Busy();
    [MethodImpl(MethodImplOptions.NoInlining)] public static long Generic<T, U>(T t, U u, (T, U) pair, Func<T, U> f) => Busy();
    [MethodImpl(MethodImplOptions.NoInlining)] public static long Spans(ReadOnlySpan<byte> a, Span<char> b, Memory<Point> m, ValueTuple<int, string, double> t) => Busy();
    [MethodImpl(MethodImplOptions.NoInlining)] public static long Nullables(int? a, Vec? v, DateTime dt, Guid g, object o) => Busy();
    [MethodImpl(MethodImplOptions.NoInlining)] public static long Refs(ref int a, out long b, in decimal c, ref Vec v) { b = 1; return Busy(); }
    [MethodImpl(MethodImplOptions.NoInlining)] public static long Typed(TypedReference tr) => Busy();
    public static async Task<long> AsyncOf<T>(T value, IProgress<T> p) { await Task.Yield(); return Busy(); }
    public static long Local() { [MethodImpl(MethodImplOptions.NoInlining)] static long Inner(int x) => Busy() + x; return Inner(2); }
    public static long Lambda() { Func<int, long> f = x => Busy() + x; return f(3); }
    static bool Even(int x) => x % 2 == 0;

    static unsafe long WithPointers(Vec v)
    {
        int x = 0; Vec vv = v; void* vp = null;
        return Pointers(&x, &vv, &vp, 1, 2, 'c', 1, 2, 3f, 4m) + Managed(&Even, 3) + Unmanaged(null, 1) + Cdecl(null, new delegate*<string, object[], int>[1]);
    }

    public static async Task<long> RoundAsync()
    {
        long s = 0; int r = 1; var v = new Vec(1, 2); var d = new Derived();
        s += d.Virt(in v, in r); s += (long)((IShape)d).Area(in v); foreach (var i in (IEnumerable<int>)d) s += i;
        s += Outer<string>.Inner<Point>.Both("a", new Point(1, 2), new());
        s += Outer<int>.Inner<double>.Both(1, 2.0, new());
        s += Arrays(new int[1, 1], new int[1][], new string[1, 1, 1], new Point[1]);
        s += WithPointers(v);
        s += Generic<int, string>(1, "a", (1, "a"), i => "x"); s += Generic<string, Point>("a", null, ("a", null), _ => null);
        s += Spans(new byte[1], new char[1], new Point[1], (1, "a", 2.0));
        s += Nullables(1, v, DateTime.UnixEpoch, Guid.Empty, "o");
        decimal c = 1; s += Refs(ref r, out long b, in c, ref v) + b;
        int tv = 5; s += Typed(__makeref(tv));
        s += await AsyncOf(3, new Progress<int>()); s += await AsyncOf("s", new Progress<string>());
        s += Local() + Lambda() + Größe.Messen(1);
        return s;
    }
}

public static class Program
{
    public static async Task Main(string[] args)
    {
        var seconds = args.Length > 0 ? double.Parse(args[0], CultureInfo.InvariantCulture) : 4.0;
        var clock = Stopwatch.StartNew();
        long rounds = 0, total = 0;
        while (clock.Elapsed.TotalSeconds < seconds)
        {
            total += await Work.RoundAsync();
            rounds++;
        }
        Console.WriteLine(string.Create(CultureInfo.InvariantCulture, $"{rounds} rounds, total {total}"));
    }
}
