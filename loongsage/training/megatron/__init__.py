"""trainer.backend=megatron: megatron-core GPTModel, parallel_state, DDP and optimizer behind the TrainBackend protocol."""
