"""infer.passes"""
