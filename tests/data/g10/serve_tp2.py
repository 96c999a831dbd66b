from vllm import LLM

llm = LLM(model="meta-llama/Llama-3.3-70B-Instruct", tensor_parallel_size=2)
