"""Named subsets of the suite. `agent`: the 23 problems on which agents (LEKA and the methods it is compared
with) are evaluated under one budget, spread over L1/L2/L3, every domain, fp32 and int8, chosen so that
tvm-default leaves room: some where the default schedule is far from ONNX Runtime, some where it is close.
Each entry says why it is in (the figures: host CPU, 1 thread, from the demo's and `ekb baseline`'s runs)."""

from __future__ import annotations

AGENT: dict[str, str] = {
    # L1: single operators
    "L1/conv2d_kws_stem": "kws conv 10x4 s2 on a 1-channel spectrogram: odd kernel, few channels",
    "L1/dwconv3x3_kws": "kws depthwise 3x3: memory-bound, tvm-default ~6x slower than a vectorized schedule",
    "L1/pwconv_vww_64x128": "wakeword pointwise at 6x6: a GEMM with a tiny spatial extent",
    "L1/matmul_mobilebert_ffn_in": "nlp 128x128x512 GEMM: compute-bound, the peak-FLOP/s case",
    "L1/softmax_mobilebert_attn": "nlp softmax over 4x128x128: a row reduction plus exp",
    "L1/dense_ae_640x128": "anomaly GEMV (batch 1): weight-bandwidth-bound from L2",
    "L1/conv1d_har": "sensors conv1d k=5 on 9 channels: 1-D window with a tiny input channel count",
    "L1/conv2d_yamnet_stem": "audio conv 3x3 s2 1->32: ONNX Runtime ~4x ahead of the rule-based schedule",
    "L1/matmulint_kws_pw": "kws int8 MatMulInteger (s8 x s8 -> s32): integer arithmetic, exact oracle",
    "L1/resize_bilinear2x_seg": "vision bilinear 2x upsample: gathers, no FLOP-heavy core",
    # L2: fused subgraphs
    "L2/ds_block_kws": "kws depthwise-separable block: two kernels to fuse or schedule together",
    "L2/uint8_ds_block_s2_vww": "wakeword 8-bit QDQ block: quantize/dequantize around dw + pw convs",
    "L2/attention_mobilebert": "nlp attention core: two batched GEMMs around a softmax",
    "L2/ffn_mobilebert": "nlp FFN: two 34 MFLOP GEMMs with bias + ReLU + residual: compute-bound",
    "L2/mlp_ae_encoder": "anomaly two-layer MLP at batch 1: GEMVs, bandwidth-bound",
    "L2/conv1d_block_har": "sensors two conv1d + maxpool: a chain of small windows",
    "L2/inverted_residual_mbv2_32ch": "vision MobileNetV2 block: expand / depthwise / project at 28x28",
    "L2/logmel_frontend_yamnet": "audio front end: framing gather, DFT as a GEMM, mel matmul, log",
    # L3: compact models
    "L3/dscnn_kws": "MLPerf Tiny KWS DS-CNN fp32: ~10 kernels, a whole-model time budget",
    "L3/dscnn_kws_int8": "MLPerf Tiny KWS DS-CNN int8 (QDQ): the deployed form of the same model",
    "L3/resnet8_ic": "MLPerf Tiny image classification ResNet-8: 3x3 convs, 25 MFLOP",
    "L3/fc_autoencoder_ad": "MLPerf Tiny anomaly detection FC autoencoder: ten GEMVs in a row",
    "L3/cnn1d_har": "1-D CNN for activity recognition: conv1d / pool chain to a dense head",
}

SUBSETS: dict[str, dict[str, str]] = {"agent": AGENT}
