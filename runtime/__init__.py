"""infer.runtime"""
