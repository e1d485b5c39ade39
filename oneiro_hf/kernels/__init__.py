"""C sources of oneiro-hf's CPU kernels, compiled on first use (`oneiro_hf.kernels.exact_attention`)."""
