//! pprof profiles (`perftools.profiles.Profile`, google/pprof's `proto/profile.proto`): what
//! `go tool pprof`, Pyroscope and Grafana read. [`Builder`] takes stacks of named frames with one
//! value per sample type and interns functions, locations and strings; [`encode_gzip`] writes
//! the on-disk form (the schema says on-disk profiles are gzipped); [`decode`] reads either form.
//!
//! ```
//! let mut b = pprof_profile::Builder::new(&[("samples", "count"), ("cpu", "nanoseconds")]);
//! b.period(("cpu", "nanoseconds"), 1_001_001);
//! let leaf_first = [pprof_profile::FrameName { name: "App::Hot()", file: "[jit]" }];
//! b.add_sample(leaf_first, &[1, 1_001_001], &[pprof_profile::Label::text("thread", "main")]).unwrap();
//! let bytes = pprof_profile::encode_gzip(&b.build());
//! let back = pprof_profile::decode(&bytes).unwrap();
//! assert_eq!(back.string(back.function[0].name), "App::Hot()");
//! ```

mod proto;

use std::collections::HashMap;
use std::io::{Read, Write};

pub use proto::{Function, Line, Location, Mapping, Profile, Sample, ValueType};

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("a sample has {got} values; the profile has {want} sample types")]
    ValueCount { got: usize, want: usize },
    #[error("not a pprof profile: {0}")]
    Decode(#[from] prost::DecodeError),
    #[error("not a gzip stream: {0}")]
    Gzip(std::io::Error),
    #[error("string index {index} is outside the string table ({len} entries)")]
    StringIndex { index: i64, len: usize },
}

/// A frame as a profile names it: the function and the file (library, module) it is in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct FrameName<'a> {
    pub name: &'a str,
    pub file: &'a str,
}

/// A sample label: text (`thread` = "worker 1") or a number with a unit (`tid` = 4711).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Label<'a> {
    Text { key: &'a str, value: &'a str },
    Number { key: &'a str, value: i64, unit: &'a str },
}

impl<'a> Label<'a> {
    pub fn text(key: &'a str, value: &'a str) -> Label<'a> {
        Label::Text { key, value }
    }
    pub fn number(key: &'a str, value: i64, unit: &'a str) -> Label<'a> {
        Label::Number { key, value, unit }
    }
}

/// Builds a profile sample by sample; equal stacks with equal labels are summed into one sample.
pub struct Builder {
    profile: Profile,
    strings: HashMap<String, i64>,
    /// (function, file) → location id (one location per function: frames carry names, not
    /// addresses that would need a mapping to mean anything).
    locations: HashMap<(i64, i64), u64>,
    /// file → mapping id.
    mappings: HashMap<i64, u64>,
    samples: HashMap<(Vec<u64>, Vec<proto::Label>), usize>,
}

impl Builder {
    /// A profile whose samples carry one value per `(type, unit)`, e.g. `("cpu", "nanoseconds")`.
    pub fn new(sample_types: &[(&str, &str)]) -> Builder {
        let mut b = Builder {
            profile: Profile::default(),
            strings: HashMap::new(),
            locations: HashMap::new(),
            mappings: HashMap::new(),
            samples: HashMap::new(),
        };
        b.string("");
        b.profile.sample_type = sample_types.iter().map(|(t, u)| ValueType { r#type: b.string(t), unit: b.string(u) }).collect();
        b
    }

    /// How far apart samples are: `period` units of `kind` (e.g. 1001001 `cpu` `nanoseconds`).
    pub fn period(&mut self, kind: (&str, &str), period: i64) -> &mut Self {
        self.profile.period_type = Some(ValueType { r#type: self.string(kind.0), unit: self.string(kind.1) });
        self.profile.period = period;
        self
    }

    /// When the collection started (Unix nanoseconds) and how long it ran.
    pub fn time(&mut self, start_unix_ns: i64, duration_ns: i64) -> &mut Self {
        self.profile.time_nanos = start_unix_ns;
        self.profile.duration_nanos = duration_ns;
        self
    }

    /// A line of free text shown with the profile (`go tool pprof -comments`).
    pub fn comment(&mut self, text: &str) -> &mut Self {
        let i = self.string(text);
        self.profile.comment.push(i);
        self
    }

    /// The sample type tools show first, by its type name.
    pub fn default_sample_type(&mut self, kind: &str) -> &mut Self {
        self.profile.default_sample_type = self.string(kind);
        self
    }

    /// Adds a stack (leaf first) with its values, one per sample type.
    pub fn add_sample<'a>(
        &mut self,
        leaf_first: impl IntoIterator<Item = FrameName<'a>>,
        values: &[i64],
        labels: &[Label],
    ) -> Result<(), Error> {
        let want = self.profile.sample_type.len();
        if values.len() != want {
            return Err(Error::ValueCount { got: values.len(), want });
        }
        let stack: Vec<u64> = leaf_first.into_iter().map(|f| self.location(f)).collect();
        let labels: Vec<proto::Label> = labels
            .iter()
            .map(|l| match l {
                Label::Text { key, value } => proto::Label { key: self.string(key), str: self.string(value), num: 0, num_unit: 0 },
                Label::Number { key, value, unit } => {
                    proto::Label { key: self.string(key), str: 0, num: *value, num_unit: self.string(unit) }
                }
            })
            .collect();
        match self.samples.get(&(stack.clone(), labels.clone())) {
            Some(&i) => {
                for (sum, v) in self.profile.sample[i].value.iter_mut().zip(values) {
                    *sum += v;
                }
            }
            None => {
                self.samples.insert((stack.clone(), labels.clone()), self.profile.sample.len());
                self.profile.sample.push(Sample { location_id: stack, value: values.to_vec(), label: labels });
            }
        }
        Ok(())
    }

    pub fn build(self) -> Profile {
        self.profile
    }

    fn string(&mut self, s: &str) -> i64 {
        if let Some(i) = self.strings.get(s) {
            return *i;
        }
        let i = self.profile.string_table.len() as i64;
        self.profile.string_table.push(s.to_string());
        self.strings.insert(s.to_string(), i);
        i
    }

    fn location(&mut self, frame: FrameName) -> u64 {
        let key = (self.string(frame.name), self.string(frame.file));
        if let Some(id) = self.locations.get(&key) {
            return *id;
        }
        let mapping_id = match self.mappings.get(&key.1) {
            Some(id) => *id,
            None => {
                let id = self.profile.mapping.len() as u64 + 1;
                // Names come with the frames: the mapping says so, and tools do not try to
                // symbolize its (absent) addresses.
                self.profile.mapping.push(Mapping {
                    id,
                    filename: key.1,
                    has_functions: true,
                    ..Default::default()
                });
                self.mappings.insert(key.1, id);
                id
            }
        };
        let id = self.profile.location.len() as u64 + 1;
        self.profile.function.push(Function { id, name: key.0, system_name: key.0, filename: key.1, start_line: 0 });
        self.profile.location.push(Location { id, mapping_id, address: 0, line: vec![Line { function_id: id, line: 0 }], is_folded: false });
        self.locations.insert(key, id);
        id
    }
}

impl Profile {
    /// The string at `index` of the string table ("" when out of range; [`Profile::check`] says).
    pub fn string(&self, index: i64) -> &str {
        usize::try_from(index).ok().and_then(|i| self.string_table.get(i)).map(String::as_str).unwrap_or("")
    }

    /// Checks every string index points into the string table.
    pub fn check(&self) -> Result<(), Error> {
        let len = self.string_table.len();
        let bad = |index: i64| usize::try_from(index).map_or(true, |i| i >= len);
        let mut indexes = Vec::new();
        for t in self.sample_type.iter().chain(self.period_type.iter()) {
            indexes.extend([t.r#type, t.unit]);
        }
        for f in &self.function {
            indexes.extend([f.name, f.system_name, f.filename]);
        }
        for m in &self.mapping {
            indexes.extend([m.filename, m.build_id]);
        }
        for s in &self.sample {
            for l in &s.label {
                indexes.extend([l.key, l.str, l.num_unit]);
            }
        }
        indexes.extend(self.comment.iter().copied());
        match indexes.into_iter().find(|i| bad(*i)) {
            Some(index) => Err(Error::StringIndex { index, len }),
            None => Ok(()),
        }
    }
}

/// The profile's protobuf bytes, gzipped (the on-disk form).
pub fn encode_gzip(profile: &Profile) -> Vec<u8> {
    use prost::Message;
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gz.write_all(&profile.encode_to_vec()).expect("writing to memory");
    gz.finish().expect("writing to memory")
}

/// Reads a profile from protobuf bytes, gzipped or not.
pub fn decode(bytes: &[u8]) -> Result<Profile, Error> {
    use prost::Message;
    let profile = if bytes.starts_with(&[0x1f, 0x8b]) {
        let mut raw = Vec::new();
        flate2::read::GzDecoder::new(bytes).read_to_end(&mut raw).map_err(Error::Gzip)?;
        Profile::decode(raw.as_slice())?
    } else {
        Profile::decode(bytes)?
    };
    profile.check()?;
    Ok(profile)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame<'a>(name: &'a str) -> FrameName<'a> {
        FrameName { name, file: "app.dll" }
    }

    #[test]
    fn equal_stacks_and_labels_sum_into_one_sample() {
        let mut b = Builder::new(&[("samples", "count")]);
        let t = [Label::text("thread", "main")];
        b.add_sample([frame("Hot"), frame("Main")], &[1], &t).unwrap();
        b.add_sample([frame("Hot"), frame("Main")], &[2], &t).unwrap();
        b.add_sample([frame("Hot"), frame("Main")], &[5], &[Label::number("tid", 7, "")]).unwrap();
        b.add_sample([frame("Cold"), frame("Main")], &[1], &t).unwrap();
        let p = decode(&encode_gzip(&b.build())).unwrap();
        assert_eq!(p.sample.len(), 3);
        assert_eq!(p.sample[0].value, vec![3]);
        assert_eq!(p.function.len(), 3, "Hot, Main, Cold: one function each");
        let leaf = p.location.iter().find(|l| l.id == p.sample[2].location_id[0]).unwrap();
        assert_eq!(p.string(p.function[(leaf.line[0].function_id - 1) as usize].name), "Cold");
        assert_eq!(p.string(p.sample[1].label[0].key), "tid");
        assert_eq!(p.sample[1].label[0].num, 7);
    }

    #[test]
    fn a_sample_needs_one_value_per_type() {
        let mut b = Builder::new(&[("samples", "count"), ("cpu", "nanoseconds")]);
        let e = b.add_sample([frame("Hot")], &[1], &[]).unwrap_err();
        assert_eq!(e.to_string(), "a sample has 1 values; the profile has 2 sample types");
    }

    #[test]
    fn string_table_starts_empty_and_indexes_are_checked() {
        let mut p = Builder::new(&[("samples", "count")]).build();
        assert_eq!(p.string_table[0], "");
        p.comment.push(99);
        use prost::Message;
        let e = decode(&p.encode_to_vec()).unwrap_err();
        assert!(e.to_string().contains("string index 99"), "{e}");
        assert!(decode(b"\x1f\x8bnot gzip").unwrap_err().to_string().starts_with("not a gzip stream"));
        assert!(decode(b"\xff\xff\xff").unwrap_err().to_string().starts_with("not a pprof profile"));
    }
}
