fit: none
