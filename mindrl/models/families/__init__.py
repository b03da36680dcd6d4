"""Model families beyond the plain decoder: each is the text builder's GPTModel plus its own
parts."""
