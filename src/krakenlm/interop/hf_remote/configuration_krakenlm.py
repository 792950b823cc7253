"""Hugging Face configuration of a krakenlm model (written by `krakenlm export hf`).

Self-contained: needs `transformers` only, not krakenlm. The fields are krakenlm's
`ModelConfig` fields, unchanged; `d_model`, `n_heads` and `ffn_dim` describe ONE sub-layer
(a Kraken layer has `degree` of them, GPT and the parallel block have one).
"""

from transformers import PretrainedConfig


class KrakenLMConfig(PretrainedConfig):
    model_type = "krakenlm"
    keys_to_ignore_at_inference = ["past_key_values", "cache"]  # the cache's two spellings
    # The generic names some transformers utilities read.
    attribute_map = {"hidden_size": "d_model", "num_hidden_layers": "n_layers",
                     "num_attention_heads": "n_heads", "max_position_embeddings": "context_len",
                     "intermediate_size": "ffn_dim"}

    def __init__(self, arch="gpt", n_layers=2, d_model=64, n_heads=4, ffn_dim=256, degree=1,
                 vocab_size=50304, context_len=1024, n_kv_heads=None, norm="layernorm",
                 activation="gelu", position="learned", bias=False, tie_embeddings=True,
                 norm_eps=1e-5, rope_theta=10000.0, use_cache=True, **kwargs):
        self.arch = arch
        self.n_layers = n_layers
        self.d_model = d_model
        self.n_heads = n_heads
        self.ffn_dim = ffn_dim
        self.degree = degree
        self.vocab_size = vocab_size
        self.context_len = context_len
        self.n_kv_heads = n_kv_heads
        self.norm = norm
        self.activation = activation
        self.position = position
        self.bias = bias
        self.tie_embeddings = tie_embeddings
        self.norm_eps = norm_eps
        self.rope_theta = rope_theta
        self.use_cache = use_cache
        kwargs["tie_word_embeddings"] = tie_embeddings
        super().__init__(**kwargs)
