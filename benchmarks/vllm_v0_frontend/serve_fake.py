"""Run the environment's vLLM OpenAI API server (`python -m vllm.entrypoints.openai.api_server`,
the command LambdaLabsML/vllm-benchmark started) over fake_executor.FakeExecutor.

    serve_fake.py MODEL_DIR [vLLM server flags]

MODEL_DIR is made on first use: a Llama-3-8B-shaped config.json and GPT-2's byte-level BPE as
a Hugging Face fast tokenizer (KRAKEN_GPT2_DIR: the directory with encoder.json / vocab.bpe).
"""
import asyncio
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
os.environ.setdefault("VLLM_NO_USAGE_STATS", "1")
os.environ.setdefault("DO_NOT_TRACK", "1")

LLAMA3_8B = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096,
             "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32,
             "num_key_value_heads": 8, "vocab_size": 50257, "max_position_embeddings": 8192,
             "rms_norm_eps": 1e-5, "rope_theta": 500000.0, "torch_dtype": "bfloat16",
             "bos_token_id": 50256, "eos_token_id": 50256, "tie_word_embeddings": False}


def make_model_dir(path: str) -> None:
    if os.path.exists(os.path.join(path, "config.json")):
        return
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast
    gpt2 = os.environ["KRAKEN_GPT2_DIR"]
    bpe = Tokenizer(models.BPE.from_file(f"{gpt2}/encoder.json", f"{gpt2}/vocab.bpe"))
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    tok = PreTrainedTokenizerFast(tokenizer_object=bpe, bos_token="<|endoftext|>",
                                  eos_token="<|endoftext|>", clean_up_tokenization_spaces=False)
    tok.model_max_length = 8192
    tok.save_pretrained(path)
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(LLAMA3_8B, f, indent=1)


if __name__ == "__main__":
    make_model_dir(sys.argv[1])
    from vllm.entrypoints.openai import api_server
    from vllm.entrypoints.openai.cli_args import make_arg_parser
    from vllm.utils import FlexibleArgumentParser

    import fake_executor
    args = make_arg_parser(FlexibleArgumentParser()).parse_args(["--model", sys.argv[1]] +
                                                                 sys.argv[2:])
    args.distributed_executor_backend = fake_executor.FakeExecutor
    asyncio.run(api_server.run_server(args))
