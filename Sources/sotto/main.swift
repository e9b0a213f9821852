print("sotto")
