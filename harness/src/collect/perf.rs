//! (collector `perf`: being written)

use anyhow::{Result, bail};

use super::Collector;
use crate::scenario::CollectorSpec;

pub fn from_spec(spec: &CollectorSpec) -> Result<Box<dyn Collector>> {
    bail!("collector `{}` is not built yet", spec.kind)
}
