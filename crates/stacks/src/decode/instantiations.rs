//! Generic instantiations for frames named by a perf map. A perf map names a generic method's
//! code by its definition — `Work::Step(!!0,int32)` for the code of `Step<bool>`, `Step<int>` and
//! `Step<string>` alike, each at its own address — while an EventPipe trace of the same process
//! says, for each code range, which instantiation it is (MethodDetails, see
//! [`eventpipe::MethodMap`]). Joined by address, a perf frame gets the trace's instantiation:
//! `Work::Step<System.Int32>(!!0,int32)`, the label EventPipe's own frame has.
//!
//! A frame is renamed only where the trace's method at its address has the frame's method name, so
//! a trace of another process (or of code freed and reused) never renames a frame.
//!
//! What this module must not know: which collectors ran, or where their files are.

use std::collections::HashMap;
use std::path::Path;

use anyhow::{Context, Result};

use model::{Collection, DsoClass, Frame};

/// Code ranges of instantiated generic methods: (start, end, method name, `<Args>`), by start.
#[derive(Debug, Default)]
pub struct Instantiations {
    ranges: Vec<(u64, u64, String, String)>,
}

/// What [`Instantiations::apply`] did to a collection's frames.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct InstantiationCount {
    /// Frames given their method's instantiation.
    pub instantiated: u64,
    /// Frames of a generic method (a `!!N` parameter) still named by its definition.
    pub uninstantiated: u64,
}

impl Instantiations {
    /// The instantiated methods of a decoded trace.
    pub fn from_methods(methods: &eventpipe::MethodMap) -> Instantiations {
        let mut ranges: Vec<_> = methods
            .methods()
            .iter()
            .filter(|m| !m.instantiation.is_empty())
            .map(|m| (m.start, m.start + u64::from(m.size), m.name.clone(), m.instantiation.clone()))
            .collect();
        ranges.sort_by_key(|r| r.0);
        Instantiations { ranges }
    }

    /// The instantiated methods of an EventPipe trace (its method events only).
    pub fn from_nettrace(path: &Path) -> Result<Instantiations> {
        let file =
            std::fs::File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
        let options = eventpipe::DecodeOptions {
            keep_events: false,
            keep_samples: false,
        };
        let decoded = eventpipe::decode(std::io::BufReader::new(file), &options)
            .with_context(|| format!("decoding {}", path.display()))?;
        Ok(Instantiations::from_methods(&decoded.methods))
    }

    /// Adds another table's ranges.
    pub fn merge(&mut self, other: Instantiations) {
        self.ranges.extend(other.ranges);
        self.ranges.sort_by_key(|r| r.0);
    }

    pub fn is_empty(&self) -> bool {
        self.ranges.is_empty()
    }

    fn at(&self, addr: u64) -> Option<&(u64, u64, String, String)> {
        let i = self.ranges.partition_point(|r| r.0 <= addr);
        self.ranges[..i].iter().rev().take(4).find(|r| addr < r.1)
    }

    /// Puts each managed frame's instantiation into its name, where one is known at its address.
    pub fn apply(&self, c: &mut Collection) -> InstantiationCount {
        let mut count = InstantiationCount::default();
        let mut renamed: HashMap<(u64, String), Option<String>> = HashMap::new();
        let frames = c
            .samples
            .iter_mut()
            .flat_map(|s| s.frames.iter_mut())
            .chain(c.events.iter_mut().flat_map(|e| e.frames.iter_mut()));
        for f in frames.filter(|f| matches!(f.class, DsoClass::Jit | DsoClass::R2r)) {
            let Some(name) = f.name.as_deref() else {
                continue;
            };
            let key = (f.addr, name.to_string());
            let new = renamed.entry(key).or_insert_with(|| {
                self.at(f.addr)
                    .and_then(|(_, _, method, args)| instantiate(name, method, args))
            });
            match new {
                Some(n) => {
                    f.name = Some(n.clone());
                    count.instantiated += 1;
                }
                None if is_open_generic(f) => count.uninstantiated += 1,
                None => {}
            }
        }
        count
    }
}

/// `name` with `args` after its method name, when its method is `method` and carries no
/// instantiation yet: `int64 [gen] Work::Step(!!0,int32)[OptimizedTier1]` →
/// `int64 [gen] Work::Step<System.Int32>(!!0,int32)[OptimizedTier1]`.
fn instantiate(name: &str, method: &str, args: &str) -> Option<String> {
    let open = name.find('(')?;
    let head = &name[..open];
    let at = head.strip_suffix(method)?;
    if !(at.is_empty() || at.ends_with("::") || at.ends_with(' ')) {
        return None;
    }
    Some(format!("{head}{args}{}", &name[open..]))
}

/// A frame of a generic method named by its definition: a method type parameter (`!!0`) among
/// its parameters, and no instantiation.
fn is_open_generic(f: &Frame) -> bool {
    f.name.as_deref().is_some_and(|n| {
        let params = n.find('(').map_or("", |i| &n[i..]);
        params.contains("!!") && !n[..n.len() - params.len()].ends_with('>')
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_instantiation_goes_after_the_method_name() {
        let perf = "int64 [gen] Work::Step(!!0,int32)[OptimizedTier1]";
        assert_eq!(
            instantiate(perf, "Step", "<System.Int32>").as_deref(),
            Some("int64 [gen] Work::Step<System.Int32>(!!0,int32)[OptimizedTier1]")
        );
        // Another method at the address, or one already instantiated: left alone.
        assert_eq!(instantiate(perf, "OtherStep", "<System.Int32>"), None);
        assert_eq!(instantiate(perf, "ep", "<System.Int32>"), None);
        assert_eq!(
            instantiate(
                "Work::Step<System.Int32>(!!0,int32)",
                "Step",
                "<System.Int32>"
            ),
            None
        );
    }

    #[test]
    fn frames_are_renamed_by_address_and_open_generics_counted() {
        let mut c = Collection::new("perf-cpu");
        let frame = |addr, name: &str| Frame {
            name: Some(name.into()),
            dso: Some("[jit]".into()),
            class: DsoClass::Jit,
            addr,
        };
        c.samples.push(model::Sample::new(
            1,
            1,
            0,
            vec![
                frame(0x1010, "int64 [gen] Work::Step(!!0,int32)[OptimizedTier1]"),
                frame(0x2010, "int64 [gen] Work::Step(!!0,int32)[QuickJitted]"),
            ],
        ));
        let table = Instantiations {
            ranges: vec![(0x1000, 0x1100, "Step".into(), "<System.Boolean>".into())],
        };
        let n = table.apply(&mut c);
        assert_eq!(
            n,
            InstantiationCount {
                instantiated: 1,
                uninstantiated: 1
            }
        );
        assert_eq!(
            c.samples[0].frames[0].name.as_deref(),
            Some("int64 [gen] Work::Step<System.Boolean>(!!0,int32)[OptimizedTier1]")
        );
        assert_eq!(
            model::frame_label(&c.samples[0].frames[0]),
            "Work::Step<System.Boolean>(!!0,int32)"
        );
    }
}
