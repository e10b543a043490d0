// system-events: system calls made from known managed methods, counted by the app itself, so a
// syscall tracer with managed stacks can be scored per method:
//   OpenFiles        opens --files files (one openat(2) each; FileStream over SafeFileHandle.Open)
//   ConnectLoopback  makes --connections TCP connections to its own listener on 127.0.0.1
//                    (one connect(2) each; the listener thread accepts in AcceptConnections)
//   StartChildren    starts --children child processes of /bin/true and waits for each
//                    (Process.Start: one vfork(2) in the parent, one execve(2) in the child,
//                    whose stack is the parent's until the exec)
//   PipeRoundTrips   writes and reads --round-trips small messages through an anonymous pipe
//                    (write(2) in WritePipe, read(2) in ReadPipe; not counted exactly: the
//                    runtime itself reads and writes too)
// The methods run one after the other on thread `events-0`, --rounds times in the measured phase,
// pausing --pause-ms after each call (a tracer copying a stack per call keeps up);
// each is also called once in the warm-up, so first-use work (assembly loads opening files, the
// child-reaping thread) stays out of the counts.
using System.Diagnostics;
using System.IO.Pipes;
using System.Net;
using System.Net.Sockets;
using System.Runtime.CompilerServices;
using System.Text.Json.Nodes;

namespace Tracelab.Workloads;

public static class SystemEvents
{
    sealed class Setup
    {
        public int Files, Connections, Children, RoundTrips, Rounds, PauseMs;
        public string Dir = "";
        public string Child = "/bin/true";
        public TcpListener Listener = null!;
        public Thread Acceptor = null!;
        public int Accepted;
        public AnonymousPipeServerStream PipeWriter = null!;
        public AnonymousPipeClientStream PipeReader = null!;
    }

    static Setup? _setup;

    public static int Main(string[] args) => WorkloadHost.Run("system-events", args, Run, WarmUp);

    static void WarmUp(WorkloadContext ctx)
    {
        var s = new Setup
        {
            Files = ctx.Options.GetInt("files", 40),
            Connections = ctx.Options.GetInt("connections", 20),
            Children = ctx.Options.GetInt("children", 5),
            RoundTrips = ctx.Options.GetInt("round-trips", 200),
            Rounds = ctx.Options.GetInt("rounds", 3),
            PauseMs = ctx.Options.GetInt("pause-ms", 1),
            Child = ctx.Options.GetString("child") ?? "/bin/true",
        };
        if (s.Files < 0 || s.Connections < 0 || s.Children < 0 || s.RoundTrips < 0 || s.Rounds <= 0)
            throw new ArgumentException("--files, --connections, --children and --round-trips must be ≥ 0, --rounds > 0");
        s.Dir = Directory.CreateTempSubdirectory("tracelab-system-events-").FullName;
        for (var i = 0; i < Math.Max(s.Files, 1); i++) File.WriteAllBytes(Path.Combine(s.Dir, $"f{i}"), new byte[64]);
        s.Listener = new TcpListener(IPAddress.Loopback, 0);
        s.Listener.Start(256);
        s.Acceptor = new Thread(() => AcceptConnections(s)) { Name = "acceptor", IsBackground = true };
        s.Acceptor.Start();
        s.PipeWriter = new AnonymousPipeServerStream(PipeDirection.Out);
        s.PipeReader = new AnonymousPipeClientStream(PipeDirection.In, s.PipeWriter.ClientSafePipeHandle);
        _setup = s;
        // One of each, so JIT, assembly loads and first-use set-up happen before the measurement.
        OpenFiles(s, 1);
        ConnectLoopback(s, 1);
        StartChildren(s, 1);
        PipeRoundTrips(s, 1);
    }

    [MethodImpl(MethodImplOptions.NoInlining)]
    static void Run(WorkloadContext ctx)
    {
        var s = _setup ?? throw new InvalidOperationException("warm-up did not run");
        long opened = 0, connected = 0, started = 0, trips = 0;
        var tid = 0;
        var t = new Thread(() =>
        {
            tid = Native.Tid();
            for (var r = 0; r < s.Rounds; r++)
            {
                opened += OpenFiles(s, s.Files);
                connected += ConnectLoopback(s, s.Connections);
                started += StartChildren(s, s.Children);
                trips += PipeRoundTrips(s, s.RoundTrips);
            }
        }) { Name = "events-0" };
        t.Start();
        t.Join();
        ctx.AddPhase(new PhaseRecord("events", nameof(OpenFiles), "events-0", tid, ctx.Clock.Elapsed.TotalMilliseconds, 0));
        s.Listener.Stop();
        s.PipeWriter.Dispose();
        s.PipeReader.Dispose();
        try { Directory.Delete(s.Dir, recursive: true); } catch (IOException) { }

        ctx.Truth["syscalls"] = new JsonObject
        {
            // Exact by construction: one openat per file, one connect per connection, one vfork
            // and one execve per child, all in the measured phase.
            ["openat"] = new JsonObject { ["method"] = nameof(OpenFiles), ["count"] = opened },
            ["connect"] = new JsonObject { ["method"] = nameof(ConnectLoopback), ["count"] = connected },
            ["vfork"] = new JsonObject { ["method"] = nameof(StartChildren), ["count"] = started },
            ["execve"] = new JsonObject { ["method"] = nameof(StartChildren), ["count"] = started, ["child"] = s.Child },
            ["write"] = new JsonObject { ["method"] = nameof(WritePipe), ["count"] = trips },
            ["read"] = new JsonObject { ["method"] = nameof(ReadPipe), ["at_least"] = trips },
        };
    }

    [MethodImpl(MethodImplOptions.NoInlining)]
    static long OpenFiles(Setup s, int n)
    {
        for (var i = 0; i < n; i++)
        {
            using (new FileStream(Path.Combine(s.Dir, $"f{i}"), FileMode.Open, FileAccess.Read, FileShare.Read, 1, FileOptions.None)) { }
            Pause(s);
        }
        return n;
    }

    [MethodImpl(MethodImplOptions.NoInlining)]
    static long ConnectLoopback(Setup s, int n)
    {
        var port = ((IPEndPoint)s.Listener.LocalEndpoint).Port;
        for (var i = 0; i < n; i++)
        {
            using var socket = new Socket(AddressFamily.InterNetwork, SocketType.Stream, ProtocolType.Tcp);
            socket.Connect(new IPEndPoint(IPAddress.Loopback, port));
            Pause(s);
        }
        return n;
    }

    [MethodImpl(MethodImplOptions.NoInlining)]
    static void AcceptConnections(Setup s)
    {
        try
        {
            while (true)
            {
                using var c = s.Listener.AcceptSocket();
                Interlocked.Increment(ref s.Accepted);
            }
        }
        catch (SocketException) { } // the listener stopped
        catch (ObjectDisposedException) { }
    }

    [MethodImpl(MethodImplOptions.NoInlining)]
    static long StartChildren(Setup s, int n)
    {
        for (var i = 0; i < n; i++)
        {
            using var p = Process.Start(new ProcessStartInfo(s.Child) { UseShellExecute = false })
                ?? throw new InvalidOperationException($"Process.Start({s.Child}) started nothing");
            p.WaitForExit();
            if (p.ExitCode != 0) throw new InvalidOperationException($"{s.Child} exited with {p.ExitCode}");
            Pause(s);
        }
        return n;
    }

    [MethodImpl(MethodImplOptions.NoInlining)]
    static long PipeRoundTrips(Setup s, int n)
    {
        var buffer = new byte[32];
        for (var i = 0; i < n; i++)
        {
            WritePipe(s.PipeWriter, buffer);
            ReadPipe(s.PipeReader, buffer);
            Pause(s);
        }
        return n;
    }

    static void Pause(Setup s)
    {
        if (s.PauseMs > 0) Thread.Sleep(s.PauseMs);
    }

    [MethodImpl(MethodImplOptions.NoInlining)]
    static void WritePipe(Stream w, byte[] buffer) => w.Write(buffer, 0, buffer.Length);

    [MethodImpl(MethodImplOptions.NoInlining)]
    static void ReadPipe(Stream r, byte[] buffer)
    {
        var got = 0;
        while (got < buffer.Length)
        {
            var n = r.Read(buffer, got, buffer.Length - got);
            if (n <= 0) throw new EndOfStreamException("the pipe closed early");
            got += n;
        }
    }
}
