#!/usr/bin/env bash
# NVIDIA dgx-spark-playbooks nvidia/vllm/README.md, "Run on two Sparks", step 8 (docs/EVIDENCE.md G10)
vllm serve meta-llama/Llama-3.3-70B-Instruct \
  --tensor-parallel-size 2 --max-model-len 2048 \
  --gpu-memory-utilization 0.8 --distributed-executor-backend ray
