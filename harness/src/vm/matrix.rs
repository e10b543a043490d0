//! The kernel axis of the matrix (being written).
use anyhow::Result;
use serde::Serialize;

#[derive(Clone, Debug, Default)]
pub struct KernelMatrixOptions {
    pub kernels: Vec<String>,
    pub scenarios: Vec<String>,
}

#[derive(Clone, Debug, Serialize)]
pub struct KernelCell {
    pub kernel: String,
    pub scenario: String,
}

pub fn run_kernel_matrix(_opts: &KernelMatrixOptions) -> Result<Vec<KernelCell>> {
    anyhow::bail!("not yet")
}
