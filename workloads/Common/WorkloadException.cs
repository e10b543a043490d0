namespace Tracelab.Workloads;

/// The exception the `exceptions` workload throws; collectors' ExceptionThrown events must name
/// exactly this type and its messages.
public sealed class WorkloadException : Exception
{
    public WorkloadException(string message) : base(message) { }
}
