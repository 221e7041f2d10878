"""Models: tiny offline Qwen2 models for tests and examples (`tiny`), and loading every role from a
local Hugging Face directory (`loading`). Import the submodules directly; this package stays light."""
