"""What JoyAI-VL-Interaction expects, independent of where it runs: the prompt assembly
(system text, history, transcript, frames, within the token budget) and the streaming
parser of its action grammar (silence / response / delegation). The in-process `gpu`
backend and any remote stage import these; nothing here imports torch or vLLM."""
