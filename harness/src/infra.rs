//! Failures around the pipeline, not in it: the Docker API, an image build, a tool that crashed.
//! A module of its own (importing nothing of the harness) because every stage that talks to the
//! outside raises it and the engine, several stages later, turns it into an `error` verdict.

/// A failure around the pipeline, not in it: the Docker API, an image build, a tool that crashed.
/// Raised where it arises (docker.rs, image.rs, collector tools) and turned by the engine into an
/// `error` verdict (exit 5), so a red cell means the pipeline broke only when it did.
#[derive(Debug, Clone)]
pub struct Infrastructure(pub String);

impl std::fmt::Display for Infrastructure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Infrastructure {}

impl Infrastructure {
    /// `err` (its whole chain, as text) as an infrastructure error.
    pub fn wrap(err: impl std::fmt::Display) -> anyhow::Error {
        anyhow::Error::new(Infrastructure(format!("{err:#}")))
    }
}

/// Whether `err` (or anything in its chain) is an [`Infrastructure`] failure.
pub fn is_infrastructure(err: &anyhow::Error) -> bool {
    err.chain().any(|e| e.is::<Infrastructure>())
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
