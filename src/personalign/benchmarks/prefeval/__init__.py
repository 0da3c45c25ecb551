"""PrefEval (Zhao et al., ICLR 2025): does a model follow a preference stated earlier in a conversation?"""
