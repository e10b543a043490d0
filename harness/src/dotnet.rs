//! (stage `dotnet`: being written)
