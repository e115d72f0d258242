"""A user's TRL script: GRPO on a tiny random Llama, reported to Parallax with the README's callback.

    python tests/scripts/trl_grpo.py PARALLAX_URL WORK_DIR

The model and its word-level tokenizer are built here and saved to WORK_DIR (nothing is downloaded): one
decoder layer of width 16 over a 24-word vocabulary, so that six GRPO steps, an evaluation every three steps
and one after training take seconds on a CPU. Run by tests/test_trl_run.py.
"""

import os
import sys

import torch
from datasets import Dataset
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast
from trl import GRPOConfig, GRPOTrainer

from parallax.client import ParallaxCallback

url, work_dir = sys.argv[1], sys.argv[2]

WORDS = "the a cat dog sat on mat ran to park is big small red blue one two three yes no".split()
vocab = {w: i for i, w in enumerate(["<pad>", "<s>", "</s>", "<unk>"] + WORDS)}
tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
tok.pre_tokenizer = pre_tokenizers.Whitespace()
tokenizer = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", pad_token="<pad>", unk_token="<unk>")
tokenizer.padding_side = "left"

torch.manual_seed(0)
config = LlamaConfig(vocab_size=len(vocab), hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
                     num_key_value_heads=1, max_position_embeddings=64, bos_token_id=1, eos_token_id=2, pad_token_id=0)
model_dir = os.path.join(work_dir, "tiny-llama")
LlamaForCausalLM(config).save_pretrained(model_dir)  # a path, as users pass one: GRPO builds its reference model from it
tokenizer.save_pretrained(model_dir)

prompts = ["the cat sat on", "a dog ran to", "the mat is", "one two", "red blue", "the park is big", "a small cat", "yes or no"]


def says_cat(completions, **kwargs):
    return [float("cat" in c) for c in completions]


args = GRPOConfig(
    output_dir=os.path.join(work_dir, "grpo-cat"), max_steps=6, per_device_train_batch_size=4, num_generations=4,
    max_completion_length=8, logging_steps=1, eval_strategy="steps", eval_steps=3, per_device_eval_batch_size=4,
    report_to="none", save_strategy="no", use_cpu=True, seed=0, learning_rate=1e-3, beta=0.04,
)
trainer = GRPOTrainer(
    model=model_dir, reward_funcs=says_cat, args=args, processing_class=tokenizer,
    train_dataset=Dataset.from_dict({"prompt": prompts * 4}), eval_dataset=Dataset.from_dict({"prompt": prompts[:4]}),
)
# As the README says; the short silence bound makes trainer_silent page within seconds of a run left running.
trainer.add_callback(ParallaxCallback(url, project="trl-e2e", config={"silent_min_s": 2, "silent_steps": 1}))
trainer.train()
trainer.evaluate()
