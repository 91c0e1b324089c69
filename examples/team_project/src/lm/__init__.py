"""A small decoder-only language model in plain JAX, trained by Ray Train (``lm.train:train_loop``)."""
