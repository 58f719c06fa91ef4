"""Training-loop callbacks (Lightning, Hugging Face Trainer, paddle.Model.fit), imported lazily by the user:
``from hookkit.integrations.lightning import HookkitCallback``."""
