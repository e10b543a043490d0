//! Where the nettrace reader gets its bytes, and their stream offsets: read from the input in
//! line ([`Input::new`]), read ahead on a second thread ([`Input::read_ahead`]), or mapped from a
//! file ([`Input::mapped`]), with pages mapped ahead of the parser and released behind it.

use std::io::Read;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, sync_channel};
use std::thread::JoinHandle;

use crate::error::{Error, Result};

/// Buffered input that knows its stream offset.
pub(super) struct Input<R> {
    feed: Feed<R>,
    /// The bytes read and not yet given back (`bytes()`; the whole file when mapped):
    /// `[pos..len]` is not yet used.
    buf: Vec<u8>,
    pos: usize,
    len: usize,
    /// Stream offset of the first byte of `bytes()`.
    base: u64,
}

/// Where [`Input`] gets its bytes.
enum Feed<R> {
    /// Reading them itself.
    Direct(R),
    /// From a thread that reads ahead.
    Ahead(ReadAhead),
    /// From a map of the file.
    Mapped(Mapping),
}

/// A thread reading the input in chunks ahead of the parser ([`Input::read_ahead`]).
pub(super) struct ReadAhead {
    /// Chunks in stream order; an empty chunk or a closed channel is the end of the input.
    chunks: Option<Receiver<std::io::Result<Vec<u8>>>>,
    /// Used chunks handed back for their memory.
    spare: SyncSender<Vec<u8>>,
    thread: Option<JoinHandle<()>>,
}

impl ReadAhead {
    /// Bytes per chunk: a hand-over per chunk (a thread wake-up at most), and each byte copied
    /// once, by the kernel, on the reading thread.
    pub(super) const CHUNK: usize = 512 << 10;
    /// Chunks the thread may be ahead by. With few chunks in flight their memory is reused
    /// soon: fresh pages (a fault each) were a fifth of the time of a pass over 5 MB.
    const DEPTH: usize = 2;

    fn start<R: Read + Send + 'static>(mut inner: R, chunk_size: usize) -> std::io::Result<ReadAhead> {
        let (send, chunks) = sync_channel::<std::io::Result<Vec<u8>>>(Self::DEPTH);
        let (spare, spares) = sync_channel::<Vec<u8>>(Self::DEPTH + 2);
        let thread = std::thread::Builder::new().name("nettrace-read".into()).spawn(move || {
            // The first reads are short, so that parsing starts soon.
            let mut size = chunk_size.min(64 << 10);
            loop {
                let mut chunk = spares.try_recv().unwrap_or_else(|_| Vec::with_capacity(chunk_size));
                chunk.clear();
                // Fills the chunk unless the input ends (read_to_end retries interrupted reads).
                let read = (&mut inner).take(size as u64).read_to_end(&mut chunk);
                let last = !matches!(read, Ok(n) if n > 0);
                if send.send(read.map(|_| chunk)).is_err() || last {
                    return;
                }
                size = (size * 2).min(chunk_size);
            }
        })?;
        Ok(ReadAhead { chunks: Some(chunks), spare, thread: Some(thread) })
    }

    /// A placeholder while the input moves to its thread.
    fn none() -> ReadAhead {
        let (spare, _) = sync_channel(0);
        ReadAhead { chunks: None, spare, thread: None }
    }

    /// The thread could not be started (and the input went with it): the next read says why.
    fn failed(e: std::io::Error) -> ReadAhead {
        let (send, chunks) = sync_channel(1);
        let _ = send.send(Err(std::io::Error::other(format!("cannot start the thread that reads the trace: {e}"))));
        let (spare, _) = sync_channel(0);
        ReadAhead { chunks: Some(chunks), spare, thread: None }
    }
}

impl Drop for ReadAhead {
    fn drop(&mut self) {
        // Without its receiver, the thread's next send fails and it returns.
        self.chunks = None;
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// How a mapped file's pages follow the parser: each `step` bytes it passes, the pages up to
/// `ahead` bytes after it are mapped and those more than `behind` bytes before it released.
#[derive(Clone, Copy, Debug)]
pub(super) struct PageSteps {
    pub step: usize,
    pub ahead: usize,
    pub behind: usize,
}

impl PageSteps {
    /// ahead + behind + step (16 MB) of the file resident in the process while the pager keeps up
    /// (past that lag the parser releases pages itself: then up to about 24 MB). Measured on
    /// 42, 257 and 271 MB traces: 4 MB steps were faster and steadier than 1 or 2 MB (each
    /// release is an inter-processor interrupt, costly in a VM: 97–102 against 68–95 M events/s
    /// at 257 MB), 8 MB no better; keeping every page mapped was slower than releasing them (66
    /// against 80 M events/s at 271 MB).
    pub const DEFAULT: PageSteps = PageSteps { step: 4 << 20, ahead: 8 << 20, behind: 4 << 20 };
}

/// A read-only map of a trace file. Its pages count in the process's memory once touched: they
/// are released behind the parser, and, with a second CPU, a pager thread maps those ahead of
/// it, so that the parser neither waits for a page fault nor for the kernel's copy of a `read`.
struct Mapping {
    /// Declared before `map`: dropped (its thread joined) first.
    pager: Option<Pager>,
    map: Arc<memmap2::Mmap>,
    steps: PageSteps,
    /// Where the parser next reports its position.
    next_notice: usize,
    /// Pages before this offset are released by the parser (when there is no pager, or it lags).
    released: usize,
}

/// The thread that maps pages ahead of the parser and releases them behind it.
struct Pager {
    /// The parser's latest position (set every `step` bytes), or [`Pager::STOP`]. A position,
    /// not a queue of them: a pager that falls behind catches up with the latest at once.
    at: Arc<AtomicUsize>,
    /// The position the pager last moved the pages to.
    done: Arc<AtomicUsize>,
    thread: Option<JoinHandle<()>>,
}

impl Pager {
    const STOP: usize = usize::MAX;

    fn start(map: Arc<memmap2::Mmap>, steps: PageSteps) -> Option<Pager> {
        let (at, done) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
        let (shared, done_shared) = (at.clone(), done.clone());
        let thread = std::thread::Builder::new()
            .name("nettrace-pages".into())
            .spawn(move || {
                let (mut mapped, mut released) = (0, 0);
                populate(&map, &mut mapped, steps.ahead);
                let mut done = 0;
                loop {
                    match shared.load(Ordering::Acquire) {
                        Pager::STOP => return,
                        at if at != done => {
                            populate(&map, &mut mapped, at + steps.ahead);
                            release(&map, &mut released, at.saturating_sub(steps.behind));
                            done = at;
                            done_shared.store(done, Ordering::Relaxed);
                        }
                        // Woken by the next position (or by nothing: then it looks again).
                        _ => std::thread::park(),
                    }
                }
            })
            .ok()?;
        Some(Pager { at, done, thread: Some(thread) })
    }

    fn moved_to(&self, at: usize) {
        self.at.store(at, Ordering::Release);
        if let Some(thread) = &self.thread {
            thread.thread().unpark();
        }
    }
}

impl Drop for Pager {
    fn drop(&mut self) {
        self.moved_to(Pager::STOP);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

const PAGE: usize = 4096;

/// Maps the pages of `map` from `*mapped` to `upto` (MADV_POPULATE_READ, Linux 5.14; on an older
/// kernel the advice fails and the parser faults the pages in itself).
fn populate(map: &memmap2::Mmap, mapped: &mut usize, upto: usize) {
    let upto = upto.min(map.len());
    if upto > *mapped {
        let _ = map.advise_range(memmap2::Advice::PopulateRead, *mapped, upto - *mapped);
        *mapped = upto;
    }
}

/// Releases the pages of `map` from `*released` to `upto` (rounded down to a page).
fn release(map: &memmap2::Mmap, released: &mut usize, upto: usize) {
    let upto = upto & !(PAGE - 1);
    if upto > *released {
        // SAFETY: the map is a read-only mapping of a file, never written: MADV_DONTNEED only
        // drops its pages from this process, and a later read of them (the parser behind the
        // pager, which is allowed) faults the file's unchanged contents back in.
        let _ = unsafe { map.unchecked_advise_range(memmap2::UncheckedAdvice::DontNeed, *released, upto - *released) };
        *released = upto;
    }
}

impl<R> Input<R> {
    pub(super) fn new(inner: R) -> Self {
        Input { feed: Feed::Direct(inner), buf: vec![0; 256 << 10], pos: 0, len: 0, base: 0 }
    }

    /// Reads `file` through a read-only map of it; `pager`: pages mapped ahead on a thread
    /// (else the parser faults them in). The file must not shrink while it is read: its pages
    /// past the new end would fault (SIGBUS). A trace being appended to is safe: the map covers
    /// what the file held when it was opened.
    pub(super) fn mapped(file: &std::fs::File, steps: PageSteps, pager: bool) -> std::io::Result<Self> {
        // SAFETY: the map is only read; see above for a file changed under it.
        let map = Arc::new(unsafe { memmap2::Mmap::map(file) }?);
        let len = map.len();
        let pager = if pager { Pager::start(map.clone(), steps) } else { None };
        let mapping = Mapping { pager, map, steps, next_notice: steps.step, released: 0 };
        Ok(Input { feed: Feed::Mapped(mapping), buf: Vec::new(), pos: 0, len, base: 0 })
    }

    /// The buffered bytes: `bytes()[pos]` is at stream offset `base + pos`.
    #[inline]
    pub(super) fn bytes(&self) -> &[u8] {
        match &self.feed {
            Feed::Mapped(m) => &m.map[..],
            _ => &self.buf,
        }
    }

    pub(super) fn offset(&self) -> u64 {
        self.base + self.pos as u64
    }

    /// The reader has used everything before the current position: a mapped file's pages move
    /// along with it.
    #[inline]
    pub(super) fn passed(&mut self) {
        let Feed::Mapped(m) = &mut self.feed else { return };
        if self.pos < m.next_notice {
            return;
        }
        m.next_notice = self.pos + m.steps.step;
        let behind = self.pos.saturating_sub(m.steps.behind);
        match &m.pager {
            Some(pager) => {
                pager.moved_to(self.pos);
                // A pager kept off the CPU (a busy machine) would let the pages the parser
                // faults in pile up: past a window's lag, the parser releases them itself, so
                // that the bound holds whatever the scheduling.
                let done = pager.done.load(Ordering::Relaxed);
                if self.pos.saturating_sub(done) > m.steps.ahead + m.steps.behind + m.steps.step {
                    m.released = m.released.max(done.saturating_sub(m.steps.behind) & !(PAGE - 1));
                    release(&m.map, &mut m.released, behind);
                }
            }
            None => release(&m.map, &mut m.released, behind),
        }
    }

    /// The next `n` bytes where they are in the buffer, when the byte after them is there too
    /// (so that reading it does not refill the buffer under them); `None` otherwise.
    pub(super) fn take_in_place(&mut self, n: usize) -> Option<(usize, usize)> {
        if self.len - self.pos <= n {
            return None;
        }
        let at = (self.pos, self.pos + n);
        self.pos += n;
        Some(at)
    }
}

impl<R: Read + Send + 'static> Input<R> {
    /// Moves the reading of a direct input to a thread of its own, reading `chunk_size` bytes
    /// at a time; any other input stays as it is.
    pub(super) fn read_ahead(&mut self, chunk_size: usize) {
        let Feed::Direct(inner) = std::mem::replace(&mut self.feed, Feed::Ahead(ReadAhead::none())) else {
            return;
        };
        self.feed = match ReadAhead::start(inner, chunk_size) {
            Ok(ahead) => Feed::Ahead(ahead),
            // `start` consumed the input only if the thread started.
            Err(e) => Feed::Ahead(ReadAhead::failed(e)),
        };
    }
}

impl<R: Read> Input<R> {
    /// Refills; returns false at end of input.
    pub(super) fn fill(&mut self) -> Result<bool> {
        if self.pos < self.len {
            return Ok(true);
        }
        if let Feed::Mapped(_) = self.feed {
            return Ok(false);
        }
        self.base += self.len as u64;
        self.pos = 0;
        self.len = 0;
        let offset = self.base;
        match &mut self.feed {
            Feed::Direct(inner) => loop {
                match inner.read(&mut self.buf) {
                    Ok(0) => return Ok(false),
                    Ok(n) => {
                        self.len = n;
                        return Ok(true);
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                    Err(source) => return Err(Error::Io { offset, source }),
                }
            },
            Feed::Ahead(ahead) => {
                let Some(next) = ahead.chunks.as_ref().and_then(|c| c.recv().ok()) else {
                    return Ok(false);
                };
                let chunk = next.map_err(|source| Error::Io { offset, source })?;
                if chunk.is_empty() {
                    return Ok(false);
                }
                let used = std::mem::replace(&mut self.buf, chunk);
                let _ = ahead.spare.try_send(used);
                self.len = self.buf.len();
                Ok(true)
            }
            Feed::Mapped(_) => Ok(false),
        }
    }

    pub(super) fn read_exact(&mut self, out: &mut [u8], what: &str) -> Result<()> {
        let mut done = 0;
        while done < out.len() {
            if !self.fill()? {
                return Err(Error::truncated(self.offset(), what));
            }
            let n = (self.len - self.pos).min(out.len() - done);
            out[done..done + n].copy_from_slice(&self.bytes()[self.pos..self.pos + n]);
            self.pos += n;
            done += n;
        }
        Ok(())
    }

    pub(super) fn u8(&mut self, what: &str) -> Result<u8> {
        if !self.fill()? {
            return Err(Error::truncated(self.offset(), what));
        }
        let b = self.bytes()[self.pos];
        self.pos += 1;
        Ok(b)
    }

    pub(super) fn u32(&mut self, what: &str) -> Result<u32> {
        let mut b = [0; 4];
        self.read_exact(&mut b, what)?;
        Ok(u32::from_le_bytes(b))
    }

    /// Replaces `out` with the next `n` bytes, growing it only as data arrives (a corrupt size
    /// on a short file costs no more memory than the file holds).
    pub(super) fn read_vec(&mut self, n: usize, out: &mut Vec<u8>, what: &str) -> Result<()> {
        out.clear();
        while out.len() < n {
            if !self.fill()? {
                return Err(Error::truncated(self.offset(), what));
            }
            let k = (self.len - self.pos).min(n - out.len());
            out.extend_from_slice(&self.bytes()[self.pos..self.pos + k]);
            self.pos += k;
        }
        Ok(())
    }

    pub(super) fn skip(&mut self, mut n: usize, what: &str) -> Result<()> {
        while n > 0 {
            if !self.fill()? {
                return Err(Error::truncated(self.offset(), what));
            }
            let k = (self.len - self.pos).min(n);
            self.pos += k;
            n -= k;
        }
        Ok(())
    }

    pub(super) fn expect_tag(&mut self, tag: u8, what: &str) -> Result<()> {
        let at = self.offset();
        let got = self.u8(what)?;
        if got != tag {
            return Err(Error::format(at, format_args!("expected tag {tag} ({what}), found {got}")));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Resident kB of the mapping that starts at `start`, from /proc/self/smaps.
    fn resident_kb(start: *const u8) -> u64 {
        let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
        let header = format!("{:x}-", start as usize);
        let at = smaps.lines().position(|l| l.starts_with(&header)).expect("the mapping is in /proc/self/smaps");
        let rss = smaps.lines().skip(at + 1).find(|l| l.starts_with("Rss:")).unwrap();
        rss.split_whitespace().nth(1).unwrap().parse().unwrap()
    }

    /// A mapped file's pages are released behind the reader, with the pager thread or without:
    /// walking 32 MB leaves at most ahead + behind + step (+ the kernel's fault-around) resident.
    #[test]
    fn pages_are_released_behind_the_reader() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("32MB");
        std::fs::write(&path, vec![7u8; 32 << 20]).unwrap();
        let steps = PageSteps { step: 1 << 20, ahead: 2 << 20, behind: 1 << 20 };
        for pager in [false, true] {
            let mut input = Input::<std::fs::File>::mapped(&std::fs::File::open(&path).unwrap(), steps, pager).unwrap();
            let start = input.bytes().as_ptr();
            let mut sum = 0u64;
            while input.fill().unwrap() {
                // Touches every page, as a parser does, and moves on a block at a time.
                let end = (input.pos + (64 << 10)).min(input.len);
                sum += input.bytes()[input.pos..end].iter().step_by(PAGE).map(|&b| u64::from(b)).sum::<u64>();
                input.pos = end;
                input.passed();
            }
            assert_eq!(sum, 7 * (32 << 20) / PAGE as u64);
            // The pager releases on its own thread: give it a moment.
            let bound = ((steps.ahead + steps.behind + steps.step) >> 10) as u64 + 1024;
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
            let mut resident = resident_kb(start);
            while resident > bound && std::time::Instant::now() < deadline {
                std::thread::sleep(std::time::Duration::from_millis(20));
                resident = resident_kb(start);
            }
            assert!(resident <= bound, "pager {pager}: {resident} kB of the 32 MB file resident, expected at most {bound} kB");
        }
    }
}
