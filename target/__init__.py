"""infer.target"""
