import pytest
from data_helpers import write_rows

from posttrain.config.sections.data import CustomClsConfig, DataConfig
from posttrain.data import RLExample, build_rl_dataset, build_sft_dataset
from posttrain.errors import ConfigError, DataError

USER_DATASET = '''
from posttrain.data import RLExample


class Doubled:
    """Every row twice, prompt ids straight from the characters (no chat template)."""

    def __init__(self, files, tokenizer, data_config):
        import json
        self.rows = [json.loads(l) for f in files for l in open(f)] * 2
        self.tokenizer = tokenizer

    def __len__(self):
        return len(self.rows)

    def __getitem__(self, k):
        text = self.rows[k]["q"]
        ids = self.tokenizer(text, add_special_tokens=False)["input_ids"]
        return RLExample(index=k, prompt_ids=ids, prompt=text, data_source="mine", ground_truth=None, extra_info={})


class WrongType(Doubled):
    def __getitem__(self, k):
        return {"prompt_ids": [1]}
'''


def _cfg(path, name):
    return DataConfig(custom_cls=CustomClsConfig(path=path, name=name))


def test_custom_class_is_loaded_and_built_with_files_tokenizer_config(tmp_path, tokenizer):
    (tmp_path / "my_data.py").write_text(USER_DATASET)
    data = write_rows(tmp_path / "d.jsonl", [{"q": "ab"}])
    ds = build_rl_dataset(_cfg(str(tmp_path / "my_data.py"), "Doubled"), data, tokenizer)
    assert len(ds) == 2
    assert isinstance(ds[1], RLExample) and ds[1].prompt_ids == [70, 71] and ds[1].data_source == "mine"


def test_custom_class_errors(tmp_path, tokenizer):
    (tmp_path / "my_data.py").write_text(USER_DATASET)
    data = write_rows(tmp_path / "d.jsonl", [{"q": "ab"}])
    module = str(tmp_path / "my_data.py")
    with pytest.raises(ConfigError, match=r"data.custom_cls.path: file not found: nope.py"):
        build_rl_dataset(_cfg("nope.py", "Doubled"), data, tokenizer)
    with pytest.raises(ConfigError, match=r"data.custom_cls.name: .*my_data.py defines no class 'Nope'; its classes are \['Doubled', 'WrongType'\]"):
        build_rl_dataset(_cfg(module, "Nope"), data, tokenizer)
    with pytest.raises(DataError, match=r"data.custom_cls: WrongType from .*: dataset\[0\] is a dict; it must return posttrain.data.RLExample"):
        build_rl_dataset(_cfg(module, "WrongType"), data, tokenizer)
    with pytest.raises(DataError, match=r"dataset\[0\] is a RLExample; it must return posttrain.data.SFTExample"):
        build_sft_dataset(_cfg(module, "Doubled"), data, tokenizer)
    (tmp_path / "broken.py").write_text("import not_a_module_anywhere\n")
    with pytest.raises(ConfigError, match=r"importing .*broken.py failed: ModuleNotFoundError"):
        build_rl_dataset(_cfg(str(tmp_path / "broken.py"), "X"), data, tokenizer)
