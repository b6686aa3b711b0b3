"""Reading the coordination topics: one consumer tailing many partitions, bounded
reads, and a term filter's marks in committed offsets."""
