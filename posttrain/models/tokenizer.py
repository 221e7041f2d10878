"""A character-level fast tokenizer with a ChatML chat template, built fully offline.

Why characters: the tiny models posttrain trains on CPU learn digit tasks reliably when every digit
is its own token (see shared notes "tiny-rl-recipe"); a BPE vocabulary would merge "12" into one token
and hide the carry structure of arithmetic. Why ChatML: it is the template of the Qwen2 family, so a
tiny model exercises exactly the prompt path a real Qwen2 checkpoint takes.

Layout of the vocabulary (ids are stable, tests and docs rely on them)::

    0 <|endoftext|>   pad (and bos, as in Qwen2)
    1 <|im_start|>    opens a chat turn
    2 <|im_end|>      closes a chat turn: the eos of chat generation
    3 <|unk|>         any character outside the set below
    4..               "\\n", then the 95 printable ASCII characters from " " to "~", written in
                      the byte-level alphabet ("Ċ" for newline, "Ġ" for space)
    ...               optional filler tokens ``<|filler_N|>`` up to the requested vocabulary size

Filler tokens are plain vocabulary entries that the character pre-tokenizer can never produce; they
only exist so that a "realistic vocabulary" model (e.g. 32k) has a tokenizer of the same size.
"""

from __future__ import annotations

from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

from posttrain.errors import ConfigError

PAD_TOKEN = "<|endoftext|>"
IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
UNK_TOKEN = "<|unk|>"
SPECIAL_TOKENS = (PAD_TOKEN, IM_START, IM_END, UNK_TOKEN)
CHARACTERS = ("\n",) + tuple(chr(c) for c in range(32, 127))
BASE_VOCAB_SIZE = len(SPECIAL_TOKENS) + len(CHARACTERS)

# ChatML as in the Qwen2 family, without Qwen's default system prompt (it would cost ~30 character
# tokens per prompt on a model whose context is a few hundred tokens). Unknown roles are refused
# so a typo in a data file fails loudly instead of producing a silently odd prompt.
#
# Tools as Qwen2.5 renders them, in less text: the `tools` passed to the template go into the system
# turn (here one line, `<tools>name(arg,...)</tools>`, where Qwen writes every schema as JSON: hundreds
# of character tokens), an assistant message's `tool_calls` become Hermes `<tool_call>` blocks, and
# consecutive `tool` messages become one user turn of `<tool_response>` blocks, exactly as Qwen2.5.
CHATML_TEMPLATE = (
    "{%- if tools -%}"
    "{{- '<|im_start|>system\\n' -}}"
    "{%- if messages and messages[0]['role'] == 'system' -%}{{- messages[0]['content'] + '\\n' -}}{%- endif -%}"
    "{{- '<tools>' -}}"
    "{%- for tool in tools -%}"
    "{%- set f = tool['function'] if tool['function'] is defined else tool -%}"
    "{{- (' ' if not loop.first else '') + f['name'] + '(' -}}"
    "{%- if f['parameters'] is defined and f['parameters']['properties'] is defined -%}"
    "{{- f['parameters']['properties'] | list | join(',') -}}"
    "{%- endif -%}"
    "{{- ')' -}}"
    "{%- endfor -%}"
    "{{- '</tools><|im_end|>\\n' -}}"
    "{%- endif -%}"
    "{%- for message in messages -%}"
    "{%- if message['role'] not in ['system', 'user', 'assistant', 'tool'] -%}"
    "{{- raise_exception('unknown chat role ' + message['role'] + '; use system, user, assistant or tool') -}}"
    "{%- elif message['role'] == 'system' and tools and loop.first -%}"
    "{%- elif message['role'] == 'tool' -%}"
    "{%- if loop.first or loop.previtem['role'] != 'tool' -%}{{- '<|im_start|>user' -}}{%- endif -%}"
    "{{- '\\n<tool_response>\\n' + message['content'] + '\\n</tool_response>' -}}"
    "{%- if loop.last or loop.nextitem['role'] != 'tool' -%}{{- '<|im_end|>\\n' -}}{%- endif -%}"
    "{%- elif message['role'] == 'assistant' and message['tool_calls'] is defined and message['tool_calls'] -%}"
    "{{- '<|im_start|>assistant' + ('\\n' + message['content'] if message['content'] else '') -}}"
    "{%- for call in message['tool_calls'] -%}"
    "{%- set call = call['function'] if call['function'] is defined else call -%}"
    "{{- '\\n<tool_call>\\n{\"name\": \"' + call['name'] + '\", \"arguments\": ' -}}"
    "{{- (call['arguments'] if call['arguments'] is string else call['arguments'] | tojson) + '}\\n</tool_call>' -}}"
    "{%- endfor -%}"
    "{{- '<|im_end|>\\n' -}}"
    "{%- else -%}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' -}}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}"
    "{{- '<|im_start|>assistant\\n' -}}"
    "{%- endif -%}"
)


def _byte_level(char: str) -> str:
    """The byte-level alphabet symbol of an ASCII character (e.g. " " -> "Ġ", "\\n" -> "Ċ")."""
    return _BYTE_SYMBOLS[ord(char)]


def _byte_symbols() -> list[str]:
    # GPT-2's reversible byte -> printable-unicode map: printable latin-1 bytes map to themselves,
    # the others to code points from 256 upwards, in byte order.
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    symbols, extra = {}, 0
    for b in range(256):
        if b in keep:
            symbols[b] = chr(b)
        else:
            symbols[b] = chr(256 + extra)
            extra += 1
    return [symbols[b] for b in range(256)]


_BYTE_SYMBOLS = _byte_symbols()


def _vocabulary(vocab_size: int | None) -> dict[str, int]:
    """Token → id for the specials, the characters and the fillers up to `vocab_size`."""
    tokens = list(SPECIAL_TOKENS) + [_byte_level(c) for c in CHARACTERS]
    if vocab_size is not None:
        if vocab_size < BASE_VOCAB_SIZE:
            raise ConfigError(
                f"vocab size {vocab_size} is smaller than the character tokenizer's {BASE_VOCAB_SIZE} "
                f"tokens; use --vocab {BASE_VOCAB_SIZE} or more (or leave it unset)"
            )
        tokens += [f"<|filler_{i}|>" for i in range(vocab_size - BASE_VOCAB_SIZE)]
    return {token: i for i, token in enumerate(tokens)}


def build_tiny_tokenizer(vocab_size: int | None = None, *, model_max_length: int = 512) -> PreTrainedTokenizerFast:
    """Build the character-level ChatML tokenizer (no files read, no network).

    `vocab_size` None gives exactly the specials + characters (100 tokens); a larger value pads with
    unused filler tokens so `len(tokenizer)` equals the model's vocabulary.

    >>> tok = build_tiny_tokenizer()
    >>> tok.decode(tok("12+7=")["input_ids"])
    '12+7='
    >>> len(tok("12+7=")["input_ids"]), tok.eos_token, tok.pad_token
    (5, '<|im_end|>', '<|endoftext|>')
    """
    # A byte-level BPE with no merges: every ASCII character is one token. Byte-level (rather than a
    # plain character split) because transformers loads a Qwen2 directory's tokenizer.json through
    # Qwen2Tokenizer, which re-applies byte-level pre-tokenization; this vocabulary gives the same
    # ids either way, so AutoTokenizer.from_pretrained round-trips exactly.
    backend = Tokenizer(models.BPE(vocab=_vocabulary(vocab_size), merges=[], unk_token=UNK_TOKEN))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    backend.decoder = decoders.ByteLevel()
    backend.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in SPECIAL_TOKENS])
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend,
        bos_token=None,
        eos_token=IM_END,
        pad_token=PAD_TOKEN,
        unk_token=UNK_TOKEN,
        extra_special_tokens=[IM_START],
        model_max_length=model_max_length,
        padding_side="left",  # prompts are left-padded for generation; trainers set it per use
        clean_up_tokenization_spaces=False,
    )
    tokenizer.chat_template = CHATML_TEMPLATE
    return tokenizer
