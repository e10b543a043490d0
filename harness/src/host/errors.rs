//! The errors a run turns into a verdict other than FAIL, in one leaf that imports nothing of the
//! harness: the stages raise them where the cause is known, and the engine, several stages later,
//! turns them into verdicts. [`Infrastructure`]: a failure around the pipeline, not in it (the
//! Docker API, an image build, a tool that crashed, a collector that could not start) → `error`,
//! exit 5. [`Unsupported`]: the environment proves a collector cannot work here → `skip`, exit 4.
//! [`Undecided`]: the run itself left nothing to judge against (the app did not end by itself in
//! time, its truth file is missing) → `inconclusive`, exit 3.

/// A failure around the pipeline, not in it: the Docker API, an image build, a tool that crashed.
/// Raised where it arises (docker.rs, image.rs, collector tools) and turned by the engine into an
/// `error` verdict (exit 5), so a red cell means the pipeline broke only when it did.
#[derive(Debug, Clone)]
pub(crate) struct Infrastructure(pub String);

impl std::fmt::Display for Infrastructure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Infrastructure {}

impl Infrastructure {
    /// `err` (its whole chain, as text) as an infrastructure error.
    pub(crate) fn wrap(err: impl std::fmt::Display) -> anyhow::Error {
        anyhow::Error::new(Infrastructure(format!("{err:#}")))
    }
}

/// Whether `err` (or anything in its chain) is an [`Infrastructure`] failure: exit 5 wherever it
/// surfaces (a run's verdict, or a command that ends with it: a results folder it cannot write).
pub fn is_infrastructure(err: &anyhow::Error) -> bool {
    err.chain().any(|e| e.is::<Infrastructure>())
}

/// A collector that cannot work in this environment for a reason the environment proves (the
/// LTTng provider needs liblttng-ust.so.0 and the target has only .so.1; no CONFIG_USER_EVENTS …).
/// The engine turns it into a SKIP verdict with this reason, never a FAIL or a PASS.
#[derive(Debug, Clone)]
pub(crate) struct Unsupported {
    pub reason: String,
}

impl std::fmt::Display for Unsupported {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.reason)
    }
}

impl std::error::Error for Unsupported {}

/// A run that cannot be decided for a reason of the run, not of the pipeline: the app did not
/// end by itself within its time, or wrote no truth file. The reason says what to change.
#[derive(Debug, Clone)]
pub struct Undecided(pub String);

impl std::fmt::Display for Undecided {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Undecided {}

/// The reason if `err` (or anything in its chain) is an [`Undecided`].
pub fn undecided_reason(err: &anyhow::Error) -> Option<String> {
    err.chain().find_map(|e| e.downcast_ref::<Undecided>()).map(|u| u.0.clone())
}

/// The skip reason if `err` (or anything in its chain) is an [`Unsupported`].
pub fn unsupported_reason(err: &anyhow::Error) -> Option<String> {
    err.chain().find_map(|e| e.downcast_ref::<Unsupported>()).map(|u| u.reason.clone())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn infrastructure_failures_are_found_under_added_context() {
        let e = Infrastructure::wrap(anyhow::anyhow!("error trying to connect: No such file or directory"))
            .context("cannot inspect image tracelab/runtime:bullseye")
            .context("starting the container target");
        assert!(is_infrastructure(&e));
        assert!(format!("{e:#}").ends_with("No such file or directory"), "{e:#}");
        assert!(!is_infrastructure(&anyhow::anyhow!("the app exited with code 1")));
    }
}
