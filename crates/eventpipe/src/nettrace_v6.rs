//! Nettrace format version 6, the one `dotnet-trace collect-linux` writes (through
//! `librecordtrace.so`, microsoft/one-collect's exporter): `Nettrace`, a reserved u32, the major
//! and minor version (6, 0), then blocks, each a u32 header (size in the low 24 bits, kind in
//! the high 8) and `size` bytes, until a zero header. Kinds: 1 trace, 2 events, 3 metadata,
//! 4 sequence point, 5 stacks, 6 threads, 8 label lists.
//!
//! Unlike V4/V5 (one process's EventPipe session), a V6 trace from collect-linux holds the whole
//! machine's perf samples (provider `Universal.Events`: one event per sample, its stack a list of
//! instruction pointers, kernel ones included), the processes, their mappings and the symbols the
//! recorder resolved (`Universal.System`), and the runtime's events as it got them through
//! user_events (provider `Microsoft-Windows-DotNETRuntime` …, their payload as EventPipe's).
//!
//! The reader takes the whole trace in memory: collect-linux recordings of a scenario are a few
//! MB. Thread and stack ids are the writer's per-flush ids, resolved here while reading.

use std::collections::BTreeMap;

use crate::error::{Error, Result};

/// A field of a V6 event's metadata: its name and type code.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct V6Field {
    pub name: String,
    /// 6 byte, 7/8 int16/uint16, 9/10 int32/uint32, 11/12 int64/uint64, 13 single, 14 double,
    /// 18 NUL-terminated UTF-16, 19 array (of `element_type`), 21 varuint, 23 UTF-8 (u16 length:
    /// seen in every `Universal.System` string one-collect writes).
    pub type_code: u8,
    pub element_type: Option<u8>,
}

/// One event type.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct V6Metadata {
    pub metadata_id: u32,
    pub provider: String,
    pub event_id: u32,
    pub name: String,
    pub fields: Vec<V6Field>,
}

/// One event, its ids resolved.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct V6Event {
    pub metadata_id: u32,
    pub pid: u32,
    pub tid: u32,
    pub processor: u32,
    /// QPC ticks (ns on Linux).
    pub timestamp: u64,
    /// Instruction pointers, leaf first; empty when the event has none.
    pub stack: Vec<u64>,
    /// Name/value labels of the event (`OpCode`, `Version`, an activity …), as text.
    pub labels: Vec<(String, String)>,
    pub payload: Vec<u8>,
}

/// A whole V6 trace.
#[derive(Clone, Debug, Default)]
pub struct V6Trace {
    pub minor_version: u32,
    /// UTC start (year, month, day, hour, minute, second, millisecond).
    pub start_time: [u16; 7],
    pub sync_time_qpc: u64,
    pub qpc_frequency: u64,
    pub pointer_size: u32,
    /// The trace block's key/value pairs (`HardwareThreadCount`, `ExpectedCPUSamplingRate` …).
    pub keys: BTreeMap<String, String>,
    pub metadata: BTreeMap<u32, V6Metadata>,
    pub events: Vec<V6Event>,
    /// Events the writer reports lost (the gap at its last sequence point).
    pub lost_events: u64,
}

impl V6Trace {
    pub fn metadata_of(&self, e: &V6Event) -> Option<&V6Metadata> {
        self.metadata.get(&e.metadata_id)
    }

    /// An event timestamp (or a duration) in QPC ticks as nanoseconds of the same clock
    /// (CLOCK_MONOTONIC on Linux, as perf's and EventPipe's).
    pub fn qpc_to_ns(&self, qpc: u64) -> u64 {
        crate::nettrace::qpc_ticks_to_ns(qpc, self.qpc_frequency)
    }

    /// The fields of an event whose metadata lists them (the `Universal.*` providers'; runtime
    /// events carry none: their payload is EventPipe's, read by the manifest). `offset` is for
    /// errors: where the event is, as the caller can say it.
    pub fn fields(&self, e: &V6Event) -> Result<Vec<(String, V6Value)>> {
        let Some(meta) = self.metadata_of(e) else {
            return Err(Error::format(0, format_args!("an event of metadata id {} no metadata block defines", e.metadata_id)));
        };
        let mut c = Cur { buf: &e.payload, pos: 0, base: 0 };
        let mut out = Vec::with_capacity(meta.fields.len());
        for f in &meta.fields {
            let what = format!("{}/{} field {}", meta.provider, meta.name, f.name);
            let v = match f.type_code {
                6 => V6Value::U64(c.u8(&what)?.into()),
                7 | 8 => V6Value::U64(c.u16(&what)?.into()),
                9 | 10 => V6Value::U64(c.u32(&what)?.into()),
                11 | 12 => V6Value::U64(c.u64(&what)?),
                21 => V6Value::U64(c.varint(&what)?),
                23 => {
                    let n = c.u16(&what)? as usize;
                    V6Value::Str(String::from_utf8_lossy(c.bytes(n, &what)?).into_owned())
                }
                other => {
                    return Err(Error::format(
                        c.at(),
                        format_args!("{what}: type code {other} is not read here (only integers and UTF-8 strings)"),
                    ));
                }
            };
            out.push((f.name.clone(), v));
        }
        Ok(out)
    }
}

/// A field value of a `Universal.*` event.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum V6Value {
    U64(u64),
    Str(String),
}

impl V6Value {
    pub fn as_u64(&self) -> Option<u64> {
        match self {
            V6Value::U64(v) => Some(*v),
            V6Value::Str(_) => None,
        }
    }
    pub fn as_str(&self) -> Option<&str> {
        match self {
            V6Value::Str(s) => Some(s),
            V6Value::U64(_) => None,
        }
    }
}

/// Whether `head` (the first 16 bytes or more of a file) starts a V6 trace.
pub fn is_nettrace_v6(head: &[u8]) -> bool {
    head.len() >= 16
        && &head[..8] == b"Nettrace"
        && u32::from_le_bytes(head[12..16].try_into().unwrap()) == 6
}

struct Cur<'a> {
    buf: &'a [u8],
    pos: usize,
    /// Offset of `buf[0]` in the stream.
    base: u64,
}

impl<'a> Cur<'a> {
    fn at(&self) -> u64 {
        self.base + self.pos as u64
    }
    fn bytes(&mut self, n: usize, what: &str) -> Result<&'a [u8]> {
        let b = self
            .buf
            .get(self.pos..self.pos.saturating_add(n))
            .ok_or_else(|| Error::truncated(self.at(), what))?;
        self.pos += n;
        Ok(b)
    }
    fn u8(&mut self, what: &str) -> Result<u8> {
        Ok(self.bytes(1, what)?[0])
    }
    fn u16(&mut self, what: &str) -> Result<u16> {
        Ok(u16::from_le_bytes(self.bytes(2, what)?.try_into().unwrap()))
    }
    fn u32(&mut self, what: &str) -> Result<u32> {
        Ok(u32::from_le_bytes(self.bytes(4, what)?.try_into().unwrap()))
    }
    fn u64(&mut self, what: &str) -> Result<u64> {
        Ok(u64::from_le_bytes(self.bytes(8, what)?.try_into().unwrap()))
    }
    fn varint(&mut self, what: &str) -> Result<u64> {
        let mut value = 0u64;
        for shift in (0..70).step_by(7) {
            let b = self.u8(what)?;
            if shift < 64 {
                value |= u64::from(b & 0x7f) << shift;
            }
            if b & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err(Error::format(
            self.at(),
            format_args!("{what}: a varint longer than 10 bytes"),
        ))
    }
    fn utf8(&mut self, what: &str) -> Result<String> {
        let n = self.varint(what)? as usize;
        Ok(String::from_utf8_lossy(self.bytes(n, what)?).into_owned())
    }
    fn done(&self) -> bool {
        self.pos >= self.buf.len()
    }
}

/// Reads a whole V6 trace.
pub fn read_v6(data: &[u8]) -> Result<V6Trace> {
    if !is_nettrace_v6(data) {
        return Err(Error::format(
            0,
            "not a nettrace V6 stream (`Nettrace` magic, major version 6)",
        ));
    }
    let minor = data
        .get(16..20)
        .ok_or_else(|| Error::truncated(16, "the minor version"))?;
    let mut trace = V6Trace {
        minor_version: u32::from_le_bytes(minor.try_into().unwrap()),
        ..V6Trace::default()
    };
    let mut pos = 20usize;
    // Per-flush tables: the writer restarts stack, thread and label ids with each event block.
    let mut stacks: BTreeMap<u32, Vec<u64>> = BTreeMap::new();
    let mut threads: BTreeMap<u64, (u32, u32)> = BTreeMap::new();
    let mut labels: BTreeMap<u32, Vec<(String, String)>> = BTreeMap::new();
    // Events per capture thread since the last sequence point that cleared them.
    let mut seen: BTreeMap<u64, u64> = BTreeMap::new();
    loop {
        let header_at = pos as u64;
        let header = data.get(pos..pos + 4).ok_or_else(|| {
            Error::truncated(header_at, "a block header (no end-of-stream block)")
        })?;
        let header = u32::from_le_bytes(header.try_into().unwrap());
        pos += 4;
        if header == 0 {
            break;
        }
        let (size, kind) = ((header & 0x00ff_ffff) as usize, header >> 24);
        let body = data.get(pos..pos + size).ok_or_else(|| {
            Error::truncated(
                header_at,
                format_args!("block of kind {kind}, {size} bytes"),
            )
        })?;
        let mut c = Cur {
            buf: body,
            pos: 0,
            base: pos as u64,
        };
        match kind {
            1 => read_trace_block(&mut c, &mut trace)?,
            2 => read_event_block(&mut c, &mut trace, &stacks, &threads, &labels, &mut seen)?,
            3 => read_metadata_block(&mut c, &mut trace)?,
            4 => {
                c.u64("sequence point timestamp")?;
                let flags = c.u32("sequence point flags")?;
                let count = c.u32("sequence point thread count")?;
                for _ in 0..count {
                    let index = c.varint("sequence point thread index")?;
                    let sequence = c.varint("sequence point sequence number")?;
                    let got = seen.get(&index).copied().unwrap_or(0);
                    trace.lost_events += sequence.saturating_sub(got);
                }
                if flags & 1 != 0 {
                    seen.clear();
                }
            }
            5 => {
                stacks.clear();
                let first = c.u32("first stack id")?;
                let count = c.u32("stack count")?;
                for i in 0..count {
                    let n = c.u32("stack size")? as usize;
                    if !n.is_multiple_of(8) {
                        return Err(Error::format(
                            c.at(),
                            format_args!(
                                "a stack of {n} bytes is no whole number of 8-byte addresses"
                            ),
                        ));
                    }
                    let raw = c.bytes(n, "stack addresses")?;
                    stacks.insert(
                        first + i,
                        raw.chunks_exact(8)
                            .map(|b| u64::from_le_bytes(b.try_into().unwrap()))
                            .collect(),
                    );
                }
            }
            6 => {
                threads.clear();
                while !c.done() {
                    let n = c.u16("thread entry size")? as usize;
                    let entry = c.bytes(n, "thread entry")?;
                    let mut e = Cur {
                        buf: entry,
                        pos: 0,
                        base: c.at() - n as u64,
                    };
                    let index = e.varint("thread index")?;
                    let (mut pid, mut tid) = (0u32, 0u32);
                    while !e.done() {
                        match e.u8("thread field kind")? {
                            2 => pid = e.varint("thread pid")? as u32,
                            3 => tid = e.varint("thread tid")? as u32,
                            // Other fields (a name …) end what we can read of the entry.
                            _ => break,
                        }
                    }
                    threads.insert(index, (pid, tid));
                }
            }
            8 => {
                labels.clear();
                let first = c.u32("first label list id")?;
                let count = c.u32("label list count")?;
                for i in 0..count {
                    labels.insert(first + i, read_label_list(&mut c)?);
                }
            }
            // Unknown kinds are skipped whole: their size says where the next block starts.
            _ => {}
        }
        pos += size;
    }
    Ok(trace)
}

fn read_trace_block(c: &mut Cur<'_>, trace: &mut V6Trace) -> Result<()> {
    // SYSTEMTIME: year, month, day of week, day, hour, minute, second, millisecond.
    let mut st = [0u16; 8];
    for v in st.iter_mut() {
        *v = c.u16("trace start time")?;
    }
    trace.start_time = [st[0], st[1], st[3], st[4], st[5], st[6], st[7]];
    trace.sync_time_qpc = c.u64("sync time")?;
    trace.qpc_frequency = c.u64("QPC frequency")?;
    trace.pointer_size = c.u32("pointer size")?;
    let count = c.u32("trace key count")?;
    for _ in 0..count {
        let k = c.utf8("trace key")?;
        let v = c.utf8("trace value")?;
        trace.keys.insert(k, v);
    }
    Ok(())
}

fn read_metadata_block(c: &mut Cur<'_>, trace: &mut V6Trace) -> Result<()> {
    let header = c.u16("metadata block header size")? as usize;
    c.bytes(header, "metadata block header")?;
    while !c.done() {
        let n = c.u16("metadata entry size")? as usize;
        let start = c.at();
        let entry = c.bytes(n, "metadata entry")?;
        let mut e = Cur {
            buf: entry,
            pos: 0,
            base: start,
        };
        let metadata_id = e.varint("metadata id")? as u32;
        let provider = e.utf8("provider name")?;
        let event_id = e.varint("event id")? as u32;
        let name = e.utf8("event name")?;
        let count = e.u16("field count")?;
        let mut fields = Vec::new();
        for _ in 0..count {
            let size = e.u16("field size")? as usize;
            let f = e.bytes(size, "field")?;
            let mut fc = Cur {
                buf: f,
                pos: 0,
                base: e.at() - size as u64,
            };
            let fname = fc.utf8("field name")?;
            let type_code = fc.u8("field type")?;
            let element_type = if type_code == 19 {
                Some(fc.u8("array element type")?)
            } else {
                None
            };
            fields.push(V6Field {
                name: fname,
                type_code,
                element_type,
            });
        }
        // Optional metadata (provider GUID, opcode …) follows: not needed here.
        trace.metadata.insert(
            metadata_id,
            V6Metadata {
                metadata_id,
                provider,
                event_id,
                name,
                fields,
            },
        );
    }
    Ok(())
}

fn read_label_list(c: &mut Cur<'_>) -> Result<Vec<(String, String)>> {
    let mut out = Vec::new();
    loop {
        let tag = c.u8("label kind")?;
        let last = tag & 0x80 != 0;
        let hex = |b: &[u8]| b.iter().map(|x| format!("{x:02x}")).collect::<String>();
        match tag & 0x7f {
            1 => out.push(("ActivityId".into(), hex(c.bytes(16, "activity id")?))),
            2 => out.push((
                "RelatedActivityId".into(),
                hex(c.bytes(16, "related activity id")?),
            )),
            3 => out.push(("TraceId".into(), hex(c.bytes(16, "trace id")?))),
            4 => out.push(("SpanId".into(), hex(c.bytes(8, "span id")?))),
            5 => {
                let k = c.utf8("label name")?;
                let v = c.utf8("label value")?;
                out.push((k, v));
            }
            6 => {
                let k = c.utf8("label name")?;
                let v = c.varint("label value")?;
                out.push((k, v.to_string()));
            }
            7 => out.push(("OpCode".into(), c.u8("opcode")?.to_string())),
            10 => out.push(("Version".into(), c.u8("version")?.to_string())),
            other => {
                return Err(Error::format(
                    c.at(),
                    format_args!("unknown label kind {other}"),
                ));
            }
        }
        if last {
            return Ok(out);
        }
    }
}

fn read_event_block(
    c: &mut Cur<'_>,
    trace: &mut V6Trace,
    stacks: &BTreeMap<u32, Vec<u64>>,
    threads: &BTreeMap<u64, (u32, u32)>,
    labels: &BTreeMap<u32, Vec<(String, String)>>,
    seen: &mut BTreeMap<u64, u64>,
) -> Result<()> {
    let header_size = c.u16("event block header size")? as usize;
    let flags = c.u16("event block flags")?;
    c.bytes(header_size.saturating_sub(4), "event block header")?;
    if flags & 1 == 0 {
        return Err(Error::format(
            c.at(),
            "an uncompressed V6 event block (only compressed headers are read)",
        ));
    }
    // Compressed headers: a field absent from an event keeps the previous event's value.
    let (mut metadata_id, mut capture, mut processor, mut thread, mut stack_id, mut label_id) =
        (0u64, 0u64, 0u64, 0u64, 0u64, 0u64);
    let mut timestamp = 0u64;
    let mut size = 0u64;
    while !c.done() {
        let f = c.u8("event flags")?;
        if f & 1 != 0 {
            metadata_id = c.varint("metadata id")?;
        }
        if f & 2 != 0 {
            c.varint("sequence number delta")?;
            capture = c.varint("capture thread")?;
            processor = c.varint("processor")?;
        }
        if f & 4 != 0 {
            thread = c.varint("thread index")?;
        }
        if f & 8 != 0 {
            stack_id = c.varint("stack id")?;
        }
        timestamp += c.varint("timestamp delta")?;
        if f & 16 != 0 {
            label_id = c.varint("label list id")?;
        }
        if f & 128 != 0 {
            size = c.varint("payload size")?;
        }
        let payload = c.bytes(size as usize, "event payload")?.to_vec();
        *seen.entry(capture).or_default() += 1;
        let (pid, tid) = threads.get(&thread).copied().unwrap_or((0, 0));
        // Ids are 1-based; 0 means none.
        let stack = if stack_id == 0 {
            Vec::new()
        } else {
            stacks.get(&(stack_id as u32)).cloned().unwrap_or_default()
        };
        let labels = if label_id == 0 {
            Vec::new()
        } else {
            labels.get(&(label_id as u32)).cloned().unwrap_or_default()
        };
        trace.events.push(V6Event {
            metadata_id: metadata_id as u32,
            pid,
            tid,
            processor: processor as u32,
            timestamp,
            stack,
            labels,
            payload,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn varint(out: &mut Vec<u8>, mut v: u64) {
        while v >= 0x80 {
            out.push((v as u8 & 0x7f) | 0x80);
            v >>= 7;
        }
        out.push(v as u8);
    }

    fn block(out: &mut Vec<u8>, kind: u32, body: &[u8]) {
        out.extend((body.len() as u32 | kind << 24).to_le_bytes());
        out.extend(body);
    }

    /// A stream laid out as one-collect's exporter writes it: metadata, a flush (sequence point,
    /// stacks, threads, labels, events) and the end.
    #[test]
    fn reads_what_the_exporter_writes() {
        let mut s = b"Nettrace".to_vec();
        s.extend([0u8; 4]);
        s.extend(6u32.to_le_bytes());
        s.extend(0u32.to_le_bytes());
        let mut meta = 0u16.to_le_bytes().to_vec();
        let mut entry = Vec::new();
        varint(&mut entry, 1);
        varint(&mut entry, 16);
        entry.extend(b"Universal.Events");
        varint(&mut entry, 1);
        varint(&mut entry, 3);
        entry.extend(b"cpu");
        entry.extend(1u16.to_le_bytes());
        let mut field = Vec::new();
        varint(&mut field, 5);
        field.extend(b"Value");
        field.push(21);
        entry.extend((field.len() as u16).to_le_bytes());
        entry.extend(&field);
        entry.extend(0u16.to_le_bytes());
        meta.extend((entry.len() as u16).to_le_bytes());
        meta.extend(&entry);
        block(&mut s, 3, &meta);
        let mut sp = 5u64.to_le_bytes().to_vec();
        sp.extend(1u32.to_le_bytes());
        sp.extend(0u32.to_le_bytes());
        block(&mut s, 4, &sp);
        let mut st = 1u32.to_le_bytes().to_vec();
        st.extend(1u32.to_le_bytes());
        st.extend(16u32.to_le_bytes());
        st.extend(0x1000u64.to_le_bytes());
        st.extend(0xffff_ffff_8100_0000u64.to_le_bytes());
        block(&mut s, 5, &st);
        let mut th = Vec::new();
        let mut t = Vec::new();
        varint(&mut t, 1);
        t.push(2);
        varint(&mut t, 4242);
        t.push(3);
        varint(&mut t, 4243);
        th.extend((t.len() as u16).to_le_bytes());
        th.extend(&t);
        block(&mut s, 6, &th);
        let mut lb = 1u32.to_le_bytes().to_vec();
        lb.extend(1u32.to_le_bytes());
        lb.push(0x80 | 7);
        lb.push(1);
        block(&mut s, 8, &lb);
        let mut ev = 20u16.to_le_bytes().to_vec();
        ev.extend(1u16.to_le_bytes());
        ev.extend([0u8; 16]);
        for ts in [1000u64, 10] {
            ev.push(223);
            varint(&mut ev, 1);
            varint(&mut ev, 0);
            varint(&mut ev, 0);
            varint(&mut ev, 1);
            varint(&mut ev, 1);
            varint(&mut ev, 1);
            varint(&mut ev, ts);
            varint(&mut ev, 1);
            varint(&mut ev, 1);
            ev.push(1);
        }
        block(&mut s, 2, &ev);
        s.extend(0u32.to_le_bytes());
        let t = read_v6(&s).unwrap();
        assert_eq!(t.metadata[&1].name, "cpu");
        assert_eq!(t.metadata[&1].provider, "Universal.Events");
        assert_eq!(t.events.len(), 2);
        let e = &t.events[1];
        assert_eq!(
            (e.pid, e.tid, e.processor, e.timestamp),
            (4242, 4243, 1, 1010)
        );
        assert_eq!(e.stack, [0x1000, 0xffff_ffff_8100_0000]);
        assert_eq!(e.labels, [("OpCode".to_string(), "1".to_string())]);
        assert_eq!(t.lost_events, 0);
        // Cut anywhere, it is an error with an offset, never a panic.
        for n in 0..s.len() {
            let _ = read_v6(&s[..n]);
        }
    }
}
