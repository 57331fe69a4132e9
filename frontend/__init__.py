"""infer.frontend"""
