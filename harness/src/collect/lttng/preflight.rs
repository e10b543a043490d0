//! Will the runtime's LTTng provider load here? .NET ships `libcoreclrtraceptprovider.so` linked
//! against the LTTng-UST soname of its build machine (`liblttng-ust.so.0`, LTTng 2.12). Where the
//! target has only `liblttng-ust.so.1` (LTTng 2.13+: Debian bookworm, trixie) the runtime's
//! `dlopen` of the provider fails and it carries on without it: no error, an empty trace. We read
//! the provider's DT_NEEDED entries and look for each LTTng-UST soname in the target's library
//! folders, and we look at whether the running app actually mapped the provider.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use object::read::elf::{Dyn, ElfFile64, FileHeader, SectionHeader};
use object::{Endianness, elf};

use crate::host::errors::Unsupported;

pub const PROVIDER_FILE: &str = "libcoreclrtraceptprovider.so";

/// Library folders the dynamic loader of a Debian-like target searches.
const LIB_DIRS: &[&str] = &[
    "lib/x86_64-linux-gnu",
    "usr/lib/x86_64-linux-gnu",
    "lib64",
    "usr/lib64",
    "lib",
    "usr/lib",
    "usr/local/lib",
];

/// The DT_NEEDED sonames of an ELF file.
pub(crate) fn needed_sonames(data: &[u8], path: &Path) -> Result<Vec<String>> {
    let file = ElfFile64::<Endianness>::parse(data)
        .map_err(|e| anyhow::anyhow!("{}: not a 64-bit ELF shared object ({e}) at byte offset 0", path.display()))?;
    let endian = file.endian();
    let header = file.elf_header();
    let sections = header
        .sections(endian, data)
        .map_err(|e| anyhow::anyhow!("{}: bad ELF section table (offset {}): {e}", path.display(), header.e_shoff.get(endian)))?;
    let mut out = Vec::new();
    for (index, section) in sections.iter().enumerate() {
        let Some((entries, link)) = section
            .dynamic(endian, data)
            .map_err(|e| anyhow::anyhow!("{}: bad .dynamic section {index} at byte offset {}: {e}", path.display(), section.sh_offset(endian)))?
        else {
            continue;
        };
        let strings = sections
            .strings(endian, data, link)
            .map_err(|e| anyhow::anyhow!("{}: bad string table of .dynamic: {e}", path.display()))?;
        for entry in entries {
            if entry.tag(endian) == elf::DT_NEEDED {
                let name = entry
                    .string(endian, strings)
                    .map_err(|e| anyhow::anyhow!("{}: DT_NEEDED names no string: {e}", path.display()))?;
                out.push(String::from_utf8_lossy(name).into_owned());
            }
        }
    }
    Ok(out)
}

/// What the check found.
#[derive(Clone, Debug)]
pub struct ProviderCheck {
    /// The provider as the target sees it.
    pub provider: PathBuf,
    pub needed: Vec<String>,
    /// The LTTng-UST sonames the provider needs (`liblttng-ust.so.0`, `liblttng-ust-tracepoint.so.0`).
    pub ust_needed: Vec<String>,
    /// `liblttng-ust.so.N` sonames present in the target's library folders.
    pub ust_present: Vec<String>,
    /// Whether the running app has the provider mapped (None: not checked on a process).
    pub loaded: Option<bool>,
}

impl ProviderCheck {
    /// The needed LTTng-UST sonames the target lacks.
    pub(crate) fn missing(&self, root: &Path) -> Vec<String> {
        self.ust_needed.iter().filter(|s| find_lib(root, s).is_none()).cloned().collect()
    }

    /// An [`Unsupported`] when the provider cannot load, with the sonames as the reason.
    pub(crate) fn require(&self, root: &Path) -> Result<(), Unsupported> {
        let missing = self.missing(root);
        if missing.is_empty() && self.loaded != Some(false) {
            return Ok(());
        }
        let present = if self.ust_present.is_empty() {
            "no liblttng-ust at all".to_string()
        } else {
            self.ust_present.iter().map(|s| format!("{s} ({})", ust_generation(s))).collect::<Vec<_>>().join(", ")
        };
        let reason = if !missing.is_empty() {
            format!(
                "the runtime's LTTng provider {} needs {} ({}), but this target has {present}: the runtime silently \
                 skips the provider and LTTng records no DotNETRuntime events",
                self.provider.display(),
                missing.join(", "),
                missing.first().map(|s| ust_generation(s)).unwrap_or_default(),
            )
        } else {
            format!(
                "the app did not load the runtime's LTTng provider {} although its libraries ({}) are present; \
                 is DOTNET_LTTng=0 set?",
                self.provider.display(),
                self.ust_needed.join(", ")
            )
        };
        Err(Unsupported { reason })
    }
}

/// `liblttng-ust.so.0` → the LTTng releases that ship it.
pub(crate) fn ust_generation(soname: &str) -> &'static str {
    match soname.rsplit('.').next() {
        Some("0") => "LTTng-UST 2.12 and older",
        Some("1") => "LTTng-UST 2.13 and newer",
        _ => "unknown LTTng-UST",
    }
}

/// A library by soname under `root`'s library folders.
pub(crate) fn find_lib(root: &Path, soname: &str) -> Option<PathBuf> {
    LIB_DIRS.iter().map(|d| root.join(d).join(soname)).find(|p| p.exists())
}

/// The `liblttng-ust.so.N` sonames under `root`.
pub fn ust_sonames(root: &Path) -> Vec<String> {
    let mut found = Vec::new();
    for d in LIB_DIRS {
        let Ok(entries) = std::fs::read_dir(root.join(d)) else { continue };
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if let Some(v) = name.strip_prefix("liblttng-ust.so.")
                && !v.is_empty()
                && v.chars().all(|c| c.is_ascii_digit())
                && !found.contains(&name)
            {
                found.push(name);
            }
        }
    }
    found.sort();
    found
}

/// Checks the provider in a runtime folder (`…/shared/Microsoft.NETCore.App/10.0.12`) of the
/// file tree at `root` (`/` for the host, a rootfs or `/proc/PID/root` for a container).
pub fn check_runtime_dir(root: &Path, runtime_dir: &Path) -> Result<ProviderCheck> {
    let provider = runtime_dir.join(PROVIDER_FILE);
    let on_host = root.join(provider.strip_prefix("/").unwrap_or(&provider));
    let data = std::fs::read(&on_host).with_context(|| {
        format!("cannot read the runtime's LTTng provider {}: is this a .NET runtime folder?", on_host.display())
    })?;
    let needed = needed_sonames(&data, &on_host)?;
    let ust_needed = needed.iter().filter(|n| n.starts_with("liblttng-ust")).cloned().collect();
    Ok(ProviderCheck { provider, needed, ust_needed, ust_present: ust_sonames(root), loaded: None })
}

/// Checks a running app: finds its runtime folder from the mapped libcoreclr.so, reads the
/// provider through `/proc/PID/root` (so a container's own files are read), and records whether
/// the provider is mapped.
pub(crate) fn check_process(host_pid: u32) -> Result<(ProviderCheck, PathBuf)> {
    let maps_path = format!("/proc/{host_pid}/maps");
    let maps = std::fs::read_to_string(&maps_path)
        .with_context(|| format!("cannot read {maps_path}: has the app (pid {host_pid}) exited?"))?;
    let mapped = |file: &str| maps.lines().filter_map(|l| l.split_whitespace().nth(5)).find(|p| p.ends_with(file)).map(PathBuf::from);
    let Some(coreclr) = mapped("/libcoreclr.so") else {
        bail!("process {host_pid} has no libcoreclr.so mapped: is it a .NET app?");
    };
    let root = PathBuf::from(format!("/proc/{host_pid}/root"));
    let mut check = check_runtime_dir(&root, coreclr.parent().unwrap_or(Path::new("/")))?;
    check.loaded = Some(mapped(&format!("/{PROVIDER_FILE}")).is_some());
    Ok((check, root))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn garbage_is_an_error_naming_the_file() {
        let err = needed_sonames(b"not an elf file at all", Path::new("/x/libfoo.so")).unwrap_err().to_string();
        assert!(err.contains("/x/libfoo.so") && err.contains("byte offset 0"), "{err}");
    }

    #[test]
    fn truncated_elf_is_an_error_not_a_panic() {
        // The first bytes of a real ELF header, cut short.
        let mut data = vec![0x7f, b'E', b'L', b'F', 2, 1, 1, 0];
        data.resize(40, 0);
        assert!(needed_sonames(&data, Path::new("cut.so")).is_err());
    }

    #[test]
    fn generations_by_soname() {
        assert_eq!(ust_generation("liblttng-ust.so.0"), "LTTng-UST 2.12 and older");
        assert_eq!(ust_generation("liblttng-ust.so.1"), "LTTng-UST 2.13 and newer");
    }
}
